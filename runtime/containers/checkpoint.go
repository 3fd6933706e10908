package containers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/renameio/v2"
	"github.com/moby/moby/api/types/checkpoint"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"

	"github.com/husk-vm/husk/rootfs"
	"github.com/husk-vm/husk/runtime/checkpoints"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// Checkpoints are VM snapshots: the VMM's memory and device state, and a
// copy of the upper disk taken while the VM is paused, so the two agree.
// A checkpoint can be restored into its own container or, as a fork, into
// any other container of the same image, as often and as concurrently as
// wanted: every restore copies the disk and starts its own VMM.
//
// Files of a checkpoint (see package checkpoints for the manifest):
//
//	vm/          what the VMM driver's Snapshot wrote
//	upper.ext4   the container's writable disk
const (
	checkpointVMDir = "vm"
	checkpointUpper = "upper.ext4"
	// checkpointsDir is where a container keeps its checkpoints when no
	// --checkpoint-dir is given (as dockerd's <container>/checkpoints).
	checkpointsDir = "checkpoints"
	// checkpointExitCode is how a container stopped by a checkpoint
	// exits: its VM is killed, as CRIU kills a checkpointed task.
	checkpointExitCode = sigkillExitCode
	// sigkillExitCode is how a process killed by SIGKILL exits (128+9).
	sigkillExitCode = 137

	// checkpointExitFile, in a container's directory, says a checkpoint
	// is stopping the container: it is written before the VM is killed
	// and removed once the exit is recorded, so a daemon killed in
	// between finds the container exited by its checkpoint, not lost.
	checkpointExitFile = "checkpoint-exit"
	// maxForks bounds one Fork call.
	maxForks = 64
	// restoreStaging and restorePrevious are the upper disk's names while
	// a restore swaps it; recoverFromCheckpointing undoes a swap a dead
	// daemon left half done.
	restoreStaging  = upperFile + ".restore"
	restorePrevious = upperFile + ".previous"
)

// checkpointDir is the directory of c's checkpoints: dir when given (a
// host directory, as --checkpoint-dir), else the container's own.
func (c *ctr) checkpointDir(dir string) checkpoints.Dir {
	if dir != "" {
		return checkpoints.Dir(dir)
	}
	return checkpoints.Dir(filepath.Join(c.dir, checkpointsDir))
}

// CheckpointCreate snapshots a running container into checkpoint
// req.CheckpointID. With req.Exit the container then stops (state exited,
// code 137); otherwise it resumes. Errors are dockerd's.
func (m *Manager) CheckpointCreate(ctx context.Context, ref string, req checkpoint.CreateRequest) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	c.mu.Lock()
	r := c.run
	if c.removed || r == nil || !c.rec.State.Running {
		c.mu.Unlock()
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("container %s is not running", c.rec.ID))
	}
	if c.rec.HasSharedMounts() {
		c.mu.Unlock()
		return errSharedMounts("checkpoint", ref)
	}
	if !checkpoints.ValidName(req.CheckpointID) {
		c.mu.Unlock()
		return errdefs.ErrUnknown.WithMessage(fmt.Sprintf("Invalid checkpoint ID (%s), only %s are allowed", req.CheckpointID, checkpoints.NameChars))
	}
	dir := c.checkpointDir(req.CheckpointDir)
	if err := dir.Clean(); err != nil {
		m.log.Warn("clean checkpoint dir", "dir", dir, "err", err)
	}
	if dir.Exists(req.CheckpointID) {
		c.mu.Unlock()
		return errdefs.ErrUnknown.WithMessage(fmt.Sprintf("cannot checkpoint container %s: checkpoint with name %s already exists for container %s", ref, req.CheckpointID, ref))
	}
	start := time.Now()
	man, err := m.checkpoint(ctx, c, r, dir, req.CheckpointID, !req.Exit)
	if err != nil {
		c.mu.Unlock()
		if errdefs.IsAlreadyExists(err) {
			return errdefs.ErrUnknown.WithMessage(fmt.Sprintf("cannot checkpoint container %s: checkpoint with name %s already exists for container %s", ref, req.CheckpointID, ref))
		}
		return fmt.Errorf("Cannot checkpoint container %s: %w", ref, err)
	}
	c.emitLocked(events.ActionCheckpoint, map[string]string{"checkpoint": man.Name})
	m.log.Info("checkpoint created", "id", c.rec.ID[:12], "checkpoint", man.Name, "dir", dir, "took", time.Since(start), "exit", req.Exit)
	if !req.Exit {
		c.mu.Unlock()
		return nil
	}
	r.checkpointed.Store(true)
	if err := renameio.WriteFile(filepath.Join(c.dir, checkpointExitFile), []byte(man.Name+"\n"), 0o600); err != nil {
		m.log.Error("record the checkpoint's stop", "id", c.rec.ID[:12], "err", err)
	}
	killErr := r.machine.Kill()
	c.mu.Unlock()
	if killErr != nil {
		return fmt.Errorf("stop %s after checkpoint: %w", ref, killErr)
	}
	// The API answers once the container shows as exited, as the CLI
	// expects to see it right after.
	select {
	case <-r.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkpoint writes the checkpoint with the VM paused. With resume, the VM
// runs again once its files are written, while they are hashed and
// synced (~80 ms for a 256 MiB guest here): a container left running was
// paused for ~280 ms of a ~290 ms checkpoint, and is now for ~200. A
// container paused by docker pause stays paused, its processes frozen or
// its VM stopped. A running container's processes are frozen across the
// snapshot (freezeProcesses). Callers hold c.mu; if the checkpoint fails,
// the container goes on as it was.
func (m *Manager) checkpoint(ctx context.Context, c *ctr, r *run, dir checkpoints.Dir, name string, resume bool) (_ checkpoints.Manifest, err error) {
	g := m.guest
	version, err := g.Driver.Version(ctx)
	if err != nil {
		return checkpoints.Manifest{}, err
	}
	kernel, initramfs, err := m.boot.Get(g.Kernel, g.Initramfs)
	if err != nil {
		return checkpoints.Manifest{}, err
	}
	// A paused container's processes are frozen already (Pause), or its
	// VM stopped.
	frozen := false
	if !c.rec.State.Paused {
		if frozen, err = c.freezeProcesses(ctx, r, "snapshot"); err != nil {
			return checkpoints.Manifest{}, err
		}
	}
	defer func() {
		if err == nil || r.vmPaused {
			return
		}
		bg := context.WithoutCancel(ctx)
		if rerr := c.resumeVM(bg, r); rerr != nil {
			m.log.Error("resume after failed checkpoint", "id", c.rec.ID[:12], "err", rerr)
		}
		if frozen {
			c.thawAfterSnapshot(bg, r)
		}
	}()
	return dir.Create(ctx, name, func(tmp string) (checkpoints.Manifest, error) {
		if err := r.machine.Pause(ctx); err != nil {
			return checkpoints.Manifest{}, fmt.Errorf("pause: %w", err)
		}
		vmDir := filepath.Join(tmp, checkpointVMDir)
		if err := os.Mkdir(vmDir, 0o700); err != nil {
			return checkpoints.Manifest{}, err
		}
		t0 := time.Now()
		if err := r.machine.Snapshot(ctx, vmDir); err != nil {
			return checkpoints.Manifest{}, err
		}
		t1 := time.Now()
		if err := rootfs.CopyDisk(ctx, filepath.Join(tmp, checkpointUpper), filepath.Join(c.dir, upperFile)); err != nil {
			return checkpoints.Manifest{}, fmt.Errorf("copy upper disk: %w", err)
		}
		m.log.Debug("checkpoint files written", "id", c.rec.ID[:12], "snapshot", t1.Sub(t0), "disk", time.Since(t1))
		if resume && !r.vmPaused {
			if err := r.machine.Resume(ctx); err != nil {
				return checkpoints.Manifest{}, fmt.Errorf("resume after checkpoint: %w", err)
			}
			// The container runs on from here, as the files are hashed
			// and synced. It is the snapshot's original and needs no
			// reseed of its own, so the thaw comes before the clock's
			// refresh, which would make it wait for one.
			if frozen {
				c.thawAfterSnapshot(ctx, r)
				frozen = false
			}
			c.freshenResumed(ctx, r)
		}
		return checkpoints.Manifest{
			VMM:         checkpoints.VMM{Kind: g.Driver.Name(), Version: version},
			Kernel:      kernel,
			Initramfs:   initramfs,
			ContainerID: c.rec.ID,
			ImageID:     c.rec.ImageID,
			Config:      c.rec.Config,
			HostConfig:  c.rec.HostConfig,
			MemoryMiB:   c.vmMemoryMiB(),
			CPUs:        c.vmCPUs(),
		}, nil
	})
}

// CheckpointList lists the complete checkpoints of a container, or those
// in dir.
func (m *Manager) CheckpointList(ctx context.Context, ref, dir string) ([]checkpoint.Summary, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return nil, err
	}
	d := c.checkpointDir(dir)
	if dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("checkpoint directory %q does not exist for container %s: %v", dir, ref, err))
		}
	}
	mans, err := d.List()
	if err != nil {
		return nil, err
	}
	out := []checkpoint.Summary{}
	for _, man := range mans {
		out = append(out, checkpoint.Summary{Name: man.Name})
	}
	return out, nil
}

// CheckpointDelete removes a checkpoint of a container, or one in dir.
func (m *Manager) CheckpointDelete(ctx context.Context, ref, name, dir string) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	err = c.checkpointDir(dir).Remove(name)
	if errdefs.IsNotFound(err) {
		return errdefs.ErrUnknown.WithMessage(fmt.Sprintf("checkpoint %s does not exist for container %s", name, ref))
	}
	return err
}

// StartCheckpoint starts a container from checkpoint name (of its own, or
// in dir): the checkpoint is verified, its disk copied over the
// container's, and its VM restored and resumed. A checkpoint that is
// corrupt, incomplete or made under another VMM, kernel or image fails
// with the reason, and the container is left as it was.
func (m *Manager) StartCheckpoint(ctx context.Context, ref, name, dir string) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	c.mu.Lock()
	shared := c.rec.HasSharedMounts()
	c.mu.Unlock()
	if shared {
		return errSharedMounts("restore a checkpoint into", ref)
	}
	ck, err := c.openCheckpoint(name, dir)
	if err != nil {
		return err
	}
	// Checked while the restore runs; the guest resumes only after.
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return c.startFrom(ctx, ref, ck, verifyInBackground(vctx, ck))
}

// verification is a checkpoint's Verify running beside its restore.
// Hashing a 256 MiB guest's checkpoint (~80 MB) takes about as long as
// QEMU's launch and load of it (~70 ms each here, warm), so a restore
// that waited for it first took that much longer. The VMM driver waits
// for it before the guest runs (vmm.Config.BeforeResume): a checkpoint
// that does not match is never resumed.
type verification struct {
	done chan struct{}
	err  error
}

func verifyInBackground(ctx context.Context, ck *checkpoints.Checkpoint) *verification {
	v := &verification{done: make(chan struct{})}
	go func() {
		defer close(v.done)
		v.err = ck.Verify(ctx)
	}()
	return v
}

// verified is a verification that is done and passed.
func verified() *verification {
	v := &verification{done: make(chan struct{})}
	close(v.done)
	return v
}

func (v *verification) wait(ctx context.Context) error {
	select {
	case <-v.done:
		return v.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errSharedMounts refuses a checkpoint or a restore of a container with
// bind mounts or volumes: they are served by virtiofsd on the host, whose
// state no VM snapshot holds (QEMU refuses to migrate vhost-user-fs too).
// tmpfs mounts live in guest memory and are fine.
func errSharedMounts(what, ref string) error {
	return errdefs.ErrNotImplemented.WithMessage(fmt.Sprintf(
		"cannot %s container %s: it has bind mounts or volumes (virtio-fs), which husk cannot checkpoint; use tmpfs or copy files in with docker cp", what, ref))
}

// openCheckpoint finds a complete checkpoint, in dockerd's words when
// there is none.
func (c *ctr) openCheckpoint(name, dir string) (*checkpoints.Checkpoint, error) {
	c.mu.Lock()
	ctrName := c.rec.Name
	c.mu.Unlock()
	missing := errdefs.ErrUnknown.WithMessage(fmt.Sprintf("checkpoint %s does not exist for container /%s", name, ctrName))
	if !checkpoints.ValidName(name) {
		return nil, missing
	}
	ck, err := c.checkpointDir(dir).Open(name)
	if errdefs.IsNotFound(err) {
		return nil, missing
	}
	if err != nil {
		return nil, unusable(name, err)
	}
	return ck, nil
}

// unusable words a checkpoint that exists but cannot be restored.
func unusable(name string, err error) error {
	return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("cannot restore checkpoint %s: %v", name, err))
}

// startFrom restores ck into c once v, the check of ck's files, passes.
// A checkpoint that fails it is refused in its words, whatever else the
// restore ran into.
func (c *ctr) startFrom(ctx context.Context, ref string, ck *checkpoints.Checkpoint, v *verification) error {
	m := c.m
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return errdefs.ErrNotFound.WithMessage("No such container: " + ref)
	}
	if c.run != nil {
		if c.rec.State.Running {
			return errdefs.ErrNotModified.WithMessage("Container already started")
		}
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is stopping", c.rec.ID))
	}
	if err := m.compatible(ctx, c, ck.Manifest); err != nil {
		return unusable(ck.Manifest.Name, err)
	}
	start := time.Now()
	r, err := c.restore(ctx, ck, v)
	if err != nil {
		if verr := v.wait(ctx); verr != nil && ctx.Err() == nil {
			return unusable(filepath.Base(ck.Dir), verr)
		}
		return fmt.Errorf("restore %s from checkpoint %s: %w", ref, ck.Manifest.Name, err)
	}
	c.setRun(r)
	c.rec.VMMemoryMiB, c.rec.VMCPUs = ck.Manifest.MemoryMiB, ck.Manifest.CPUs
	c.rec.State = container.State{
		Status: container.StateRunning, Running: true, Pid: r.machine.PID(),
		StartedAt: time.Now().UTC().Format(time.RFC3339Nano), FinishedAt: zeroTime, Health: c.rec.State.Health,
	}
	c.startHealthLocked()
	if err := c.save(); err != nil {
		m.log.Error("persist restored container", "id", c.rec.ID, "err", err)
	}
	c.hub.started(r.stdin)
	go c.monitor(r)
	m.log.Info("container restored", "id", c.rec.ID[:12], "checkpoint", ck.Manifest.Name, "from", ck.Manifest.ContainerID[:min(12, len(ck.Manifest.ContainerID))], "took", time.Since(start))
	return nil
}

// compatible checks that ck can be restored into c under this daemon.
func (m *Manager) compatible(ctx context.Context, c *ctr, man checkpoints.Manifest) error {
	g := m.guest
	version, err := g.Driver.Version(ctx)
	if err != nil {
		return err
	}
	kernel, initramfs, err := m.boot.Get(g.Kernel, g.Initramfs)
	if err != nil {
		return err
	}
	mem, n := g.memoryMiB(c.rec.HostConfig), cpus(c.rec.HostConfig, g.CPUs)
	switch {
	case man.VMM.Kind != g.Driver.Name() || man.VMM.Version != version:
		return fmt.Errorf("it was made by %s %s, this daemon runs %s %s", man.VMM.Kind, man.VMM.Version, g.Driver.Name(), version)
	case man.Kernel != kernel:
		return errors.New("it was made under another guest kernel")
	case man.Initramfs != initramfs:
		return errors.New("it was made with another guest initramfs (another husk-agent)")
	case man.ImageID != c.rec.ImageID:
		return fmt.Errorf("it is of image %s, the container of image %s", man.ImageID, c.rec.ImageID)
	case man.MemoryMiB < mem || man.CPUs < n:
		// A VM at least as big as the container needs does: its cgroup
		// then holds it to its own limits (restore), as after a docker
		// update that changed them within the VM it ran in.
		return fmt.Errorf("it has %d MiB and %d CPUs, the container needs %d MiB and %d CPUs", man.MemoryMiB, man.CPUs, mem, n)
	}
	return nil
}

// restore swaps ck's disk in, restores the VM, resuming it once v has
// passed, and opens an agent session on it. On error the container's own
// disk is back and nothing runs. Callers hold c.mu.
func (c *ctr) restore(ctx context.Context, ck *checkpoints.Checkpoint, v *verification) (_ *run, err error) {
	m := c.m
	layers, err := m.images.Layers(ctx, c.rec.ImageID)
	if err != nil {
		return nil, fmt.Errorf("layers of %s: %w", c.rec.ImageID, err)
	}
	base, err := m.disks.EnsureBase(ctx, c.rec.ImageID, layers)
	if err != nil {
		return nil, fmt.Errorf("base disk of %s: %w", c.rec.ImageID, err)
	}
	upper := filepath.Join(c.dir, upperFile)
	staging := filepath.Join(c.dir, restoreStaging)
	previous := filepath.Join(c.dir, restorePrevious)
	_ = os.Remove(staging)
	if err := rootfs.CopyDisk(ctx, staging, ck.Path(checkpointUpper)); err != nil {
		return nil, fmt.Errorf("copy checkpoint disk: %w", err)
	}
	defer os.Remove(staging)
	if err := os.Rename(upper, previous); err != nil {
		return nil, fmt.Errorf("set the container's disk aside: %w", err)
	}
	if err := os.Rename(staging, upper); err != nil {
		_ = os.Rename(previous, upper)
		return nil, fmt.Errorf("put the checkpoint's disk in place: %w", err)
	}
	defer func() {
		if err != nil {
			if rerr := os.Rename(previous, upper); rerr != nil {
				m.log.Error("put the container's disk back after a failed restore", "id", c.rec.ID[:12], "err", rerr)
			}
			return
		}
		_ = os.Remove(previous)
		_ = syncDir(c.dir)
	}()
	if err := syncDir(c.dir); err != nil {
		return nil, err
	}

	vmDir := c.vmDir()
	if err := os.MkdirAll(vmDir, 0o700); err != nil {
		return nil, fmt.Errorf("create vm dir: %w", err)
	}
	c.rec.VMDir = vmDir
	// The copy gets this container's own TAP, address and published
	// ports, and /etc/hosts with its links' entries as at a start (their
	// variables are in the restored memory); the guest is told below.
	linkHosts, _, err := c.resolveLinks()
	if err != nil {
		return nil, err
	}
	att, err := c.attachNetwork(ctx, linkHosts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.detachNetwork(context.WithoutCancel(ctx))
		}
	}()
	identity := &proto.IdentitySpec{Hostname: c.rec.Config.Hostname, Hosts: hostsFile(c.rec.Config.Hostname)}
	var nets []vmm.Net
	if att != nil {
		nets = att.Nets
		identity.Hosts, identity.ResolvConf, identity.DNSServer, identity.Network = att.Hosts, att.ResolvConf, att.DNSServer, att.Guest
	}
	g := m.guest
	var verifyWait time.Duration
	machine, err := g.Driver.Restore(ctx, vmm.Config{
		ID: c.rec.ID[:12], Dir: vmDir, Kernel: g.Kernel, Initramfs: g.Initramfs, Cmdline: g.Cmdline,
		MemoryMiB: ck.Manifest.MemoryMiB, CPUs: ck.Manifest.CPUs, Accel: g.Accel,
		Disks: []vmm.Disk{
			{Path: base, ReadOnly: true, Serial: baseSerial},
			{Path: upper, Serial: upperSerial},
		},
		Nets: nets,
		BeforeResume: func(ctx context.Context) error {
			t := time.Now()
			defer func() { verifyWait = time.Since(t) }()
			if err := v.wait(ctx); err != nil {
				return fmt.Errorf("checkpoint files: %w", err)
			}
			return nil
		},
	}, ck.Path(checkpointVMDir))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = machine.Kill()
			_ = machine.Cleanup()
		}
	}()
	restored := time.Now()
	readyCtx, cancel := context.WithTimeout(ctx, g.ReadyTimeout)
	defer cancel()
	// The refresh is the session's first request, which saves the round
	// trip of a ping.
	refresh := func(ctx context.Context, client *host.Client) error {
		if err := client.Freshen(ctx, identity); err != nil {
			return fmt.Errorf("refresh the restored guest (clock, RNG, identity): %w", err)
		}
		return nil
	}
	client, err := host.ConnectWith(readyCtx, machine, agentRetry, refresh)
	if err != nil {
		vmm.ReportStall(ctx, readyCtx, m.log, c.rec.ID[:12], machine, g.KernelSymbol)
		if agentErr := (*host.AgentError)(nil); errors.As(err, &agentErr) {
			return nil, err
		}
		return nil, fmt.Errorf("agent after restore: %w (console log: %s)", err, filepath.Join(vmDir, "console.log"))
	}
	defer func() {
		if err != nil {
			_ = client.Close()
		}
	}()
	// The container's limits may not be the checkpointed one's (a docker
	// update since, or another container's checkpoint): its own hold
	// before its processes run on.
	if want := limitsOf(c.rec.HostConfig); ck.Manifest.HostConfig == nil || limitsOf(ck.Manifest.HostConfig) != want {
		if err := client.SetLimits(readyCtx, want); err != nil {
			return nil, fmt.Errorf("set the container's limits in the restored guest: %w", err)
		}
	}
	// The snapshot's processes were frozen for it, or by docker pause
	// (freezeProcesses); they run from here, with the copy's own clock and
	// RNG.
	if err := c.thawProcesses(readyCtx, client, "restore"); err != nil {
		return nil, err
	}
	m.log.Debug("checkpoint restored", "id", c.rec.ID[:12], "verify_wait", verifyWait, "connect_refresh", time.Since(restored))
	r := &run{machine: machine, client: client, proc: client.Process(mainProcess), exited: make(chan struct{})}
	if c.rec.Config.OpenStdin {
		if r.stdin, err = r.proc.Stdin(ctx); err != nil {
			return nil, fmt.Errorf("open stdin: %w", err)
		}
	}
	return r, nil
}

// ForkResult names one container Fork made.
type ForkResult struct {
	ID   string `json:"Id"`
	Name string `json:"Name"`
}

// Fork creates n containers with the image and configuration of ref and
// restores checkpoint name (of ref, or in dir) into all of them at once.
// It is all or nothing: if any restore fails, every fork is removed.
func (m *Manager) Fork(ctx context.Context, ref, name, dir string, n int) ([]ForkResult, error) {
	if n < 1 || n > maxForks {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("fork count %d out of range 1-%d", n, maxForks))
	}
	src, err := m.lookup(ref)
	if err != nil {
		return nil, err
	}
	ck, err := src.openCheckpoint(name, dir)
	if err != nil {
		return nil, err
	}
	// Verified once for all the restores that share it.
	if err := ck.Verify(ctx); err != nil {
		return nil, unusable(name, err)
	}
	src.mu.Lock()
	req := CreateRequest{Config: cloneConfig(src.rec.Config, src.rec.ID), HostConfig: cloneHostConfig(src.rec.HostConfig)}
	src.mu.Unlock()
	var forks []ForkResult
	defer func() {
		if err != nil {
			for _, f := range forks {
				if rmErr := m.Remove(context.WithoutCancel(ctx), f.ID, RemoveOptions{Force: true}); rmErr != nil {
					m.log.Error("remove fork after failure", "id", f.ID[:12], "err", rmErr)
				}
			}
		}
	}()
	for range n {
		resp, cerr := m.Create(ctx, req)
		if cerr != nil {
			err = fmt.Errorf("create fork: %w", cerr)
			return nil, err
		}
		c, lerr := m.lookup(resp.ID)
		if lerr != nil {
			err = lerr
			return nil, err
		}
		forks = append(forks, ForkResult{ID: resp.ID, Name: c.rec.Name})
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, f := range forks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, lerr := m.lookup(f.ID)
			if lerr != nil {
				errs[i] = lerr
				return
			}
			errs[i] = c.startFrom(ctx, f.ID, ck, verified())
		}()
	}
	wg.Wait()
	if err = errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("fork %s from checkpoint %s: %w", ref, name, err)
	}
	return forks, nil
}

// cloneConfig copies a fork's configuration. A hostname the user chose
// is kept; the default one (the source's short ID) is dropped so that the
// fork gets its own, as any new container does: the restore re-identifies
// the guest.
func cloneConfig(cfg *container.Config, srcID string) *container.Config {
	out := *cfg
	if out.Hostname == srcID[:12] {
		out.Hostname = ""
	}
	return &out
}

func cloneHostConfig(hc *container.HostConfig) *container.HostConfig {
	if hc == nil {
		return nil
	}
	out := *hc
	return &out
}

// recoverFromCheckpointing tidies what a daemon killed during a checkpoint
// or a restore of c left: temporary checkpoint directories (never listed,
// now removed) and an upper disk set aside for a restore that never
// finished (put back).
func (m *Manager) recoverFromCheckpointing(c *ctr) {
	if err := c.checkpointDir("").Clean(); err != nil {
		m.log.Warn("clean checkpoints", "id", c.rec.ID[:12], "err", err)
	}
	upper := filepath.Join(c.dir, upperFile)
	previous := filepath.Join(c.dir, restorePrevious)
	if _, err := os.Stat(previous); err == nil {
		if _, err := os.Stat(upper); errors.Is(err, os.ErrNotExist) {
			if err := os.Rename(previous, upper); err != nil {
				m.log.Error("put back the disk of an unfinished restore", "id", c.rec.ID[:12], "err", err)
			}
		} else {
			// The restore got as far as the new disk: it had its VM.
			_ = os.Remove(previous)
		}
	}
	_ = os.Remove(filepath.Join(c.dir, restoreStaging))
}
