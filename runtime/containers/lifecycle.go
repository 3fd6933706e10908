package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	sigtable "github.com/moby/sys/signal"

	"github.com/husk-vm/husk/runtime/logs"
	husknet "github.com/husk-vm/husk/runtime/network"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// mainProcess is the agent's ID for a container's main process.
const mainProcess = "main"

// Serials the agent uses to tell the base and upper disks apart.
const (
	baseSerial  = "husk-base"
	upperSerial = "husk-upper"
)

// RootDiskSlots are a container VM's base and upper disks as empty
// removable disks, which a template can boot with so that a restore puts
// the container's disks into them rather than plugging new ones
// (templates.Options.Slots).
func RootDiskSlots() []vmm.Disk {
	return []vmm.Disk{{ReadOnly: true, Serial: baseSerial, Removable: true}, {Serial: upperSerial, Removable: true}}
}

// ctr is one container in memory.
type ctr struct {
	m   *Manager
	dir string
	log *logs.File
	hub *hub
	// imageID is rec.ImageID, which never changes: read without mu.
	imageID string

	// live mirrors run != nil for the image store, which asks, holding
	// its own lock, whether a container runs and so may not take mu.
	live atomic.Bool

	mu      sync.Mutex
	rec     Record
	run     *run // non-nil from start until the VM is gone; set by setRun
	waiters []waiter
	removed bool
	// busy is set while a VM of a stopped container does maintenance
	// (docker cp); a start or removal meanwhile is refused.
	busy bool
	// maint serialises maintenance VMs.
	maint   sync.Mutex
	restart restartState
	// health runs the container's health probes while it runs (health.go).
	health *healthMonitor
}

// setRun records the container's current boot (nil: none). Callers hold
// c.mu.
func (c *ctr) setRun(r *run) {
	c.run = r
	c.live.Store(r != nil)
}

// run is one boot of a container's VM.
type run struct {
	machine vmm.Machine
	client  *host.Client
	proc    *host.Process
	stdin   io.WriteCloser
	// shares are the virtiofsd processes serving the VM's mounts.
	shares *shares
	// exited is closed once the exit is recorded and the VM is gone.
	exited chan struct{}
	// checkpointed is set when a checkpoint ends the run (Exit): the VM
	// is killed on purpose and the exit is recorded as a kill, not a loss.
	checkpointed atomic.Bool
	// vmKilled is set when the VM was killed because its agent did not
	// deliver a SIGKILL in time: the process died with it, as it would
	// have by the signal, so the exit is recorded as that kill.
	vmKilled atomic.Bool
	// resend: the guest's output was read by a daemon that died; what it
	// never acknowledged storing is sent again.
	resend bool
	// vmPaused: docker pause stopped the VM's vCPUs, because its agent
	// could not freeze the container's processes (Pause). Guarded by c.mu.
	vmPaused bool
}

type waiter struct {
	cond container.WaitCondition
	ch   chan container.WaitResponse
}

// Start boots the container's VM and runs its main process.
func (m *Manager) Start(ctx context.Context, ref string) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.run == nil {
		// An API start is a fresh start: the policy's count and a manual
		// stop are forgotten, and a scheduled restart is taken over.
		c.cancelRestart()
		c.restart = restartState{}
		c.rec.ManuallyStopped = false
		c.rec.RestartCount = 0
	}
	c.mu.Unlock()
	attempted, err := c.start(ctx, ref)
	if err != nil && attempted && c.autoRemove() {
		// As dockerd: a --rm container whose start failed is removed, and
		// the CLI waits for that (wait condition "removed"). One whose
		// start was refused (running, paused, being removed) is not.
		if rmErr := m.remove(context.WithoutCancel(ctx), c, ref, RemoveOptions{Force: true}); rmErr != nil {
			m.log.Error("auto-remove after failed start", "id", c.rec.ID[:12], "err", rmErr)
		}
	}
	return err
}

func (c *ctr) autoRemove() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec.HostConfig.AutoRemove
}

// start starts c unless its state refuses it; attempted is whether it
// tried (and so, on error, failed rather than refused).
func (c *ctr) start(ctx context.Context, ref string) (attempted bool, err error) {
	m := c.m
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return false, errdefs.ErrNotFound.WithMessage("No such container: " + ref)
	}
	if c.busy {
		return false, errBusy(c.rec.ID)
	}
	if c.rec.State.Dead || c.rec.RemovalInProgress {
		return false, errdefs.ErrConflict.WithMessage("container is marked for removal and cannot be started")
	}
	if c.run != nil {
		if c.rec.State.Paused {
			return false, errdefs.ErrConflict.WithMessage("cannot start a paused container, try unpause instead")
		}
		if c.rec.State.Running {
			return false, errdefs.ErrNotModified.WithMessage("Container already started")
		}
		return false, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is stopping", c.rec.ID))
	}
	if err := c.configureLog(); err != nil {
		c.recordStartFailure(err)
		return true, err
	}
	c.log.BeginRun()
	r, err := c.boot(ctx)
	if err != nil {
		c.recordStartFailure(err)
		return true, startError(err)
	}
	c.setRun(r)
	if cs := c.rec.HostConfig.CpusetCpus; cs != "" {
		if err := pinVMM(r.machine.PID(), cs); err != nil {
			m.log.Warn("pin the VM to its cpuset", "id", c.rec.ID[:12], "cpuset", cs, "err", err)
		}
	}
	now := time.Now().UTC()
	c.rec.VMMemoryMiB, c.rec.VMCPUs = m.guest.memoryMiB(c.rec.HostConfig), cpus(c.rec.HostConfig, m.guest.CPUs)
	c.rec.State = container.State{
		Status: container.StateRunning, Running: true, Pid: r.machine.PID(),
		StartedAt: now.Format(time.RFC3339Nano), FinishedAt: zeroTime, Health: c.rec.State.Health,
	}
	c.startHealthLocked()
	if err := c.save(); err != nil {
		m.log.Error("persist started container", "id", c.rec.ID, "err", err)
	}
	c.hub.started(r.stdin)
	go c.monitor(r)
	c.emitResourcesLocked(true)
	c.emitLocked(events.ActionStart, nil)
	m.log.Info("container started", "id", c.rec.ID[:12], "vmm_pid", r.machine.PID())
	return true, nil
}

// boot starts the VM, waits for the agent, prepares the root and starts the
// main process. On error nothing is left running. Callers hold c.mu.
func (c *ctr) boot(ctx context.Context) (_ *run, err error) {
	cfg := c.rec.Config
	linkHosts, linkEnv, err := c.resolveLinks()
	if err != nil {
		return nil, err
	}
	machine, client, sh, proc, err := c.bootVM(ctx, true, linkHosts, &proto.ProcessSpec{
		Args: append([]string{c.rec.Path}, c.rec.Args...), Env: processEnv(cfg, linkEnv),
		Cwd: cfg.WorkingDir, User: cfg.User, GroupAdd: c.rec.HostConfig.GroupAdd, Terminal: cfg.Tty, Stdin: cfg.OpenStdin,
		NoNewPrivileges: noNewPrivileges(c.rec.HostConfig),
		ConsoleSize:     consoleSize(cfg.Tty, c.rec.HostConfig.ConsoleSize),
		Rlimits:         containerRlimits(c.rec.HostConfig),
		Capabilities:    containerCapabilities(c.rec.HostConfig, false),
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			discardVM(machine, client)
			sh.kill(c.m.log)
			c.detachNetwork(context.WithoutCancel(ctx))
		}
	}()
	r := &run{machine: machine, client: client, proc: proc, shares: sh, exited: make(chan struct{})}
	if cfg.OpenStdin {
		if r.stdin, err = proc.Stdin(ctx); err != nil {
			return nil, fmt.Errorf("open stdin: %w", err)
		}
	}
	return r, nil
}

// discardVM takes down a VM whose main process never started.
func discardVM(machine vmm.Machine, client *host.Client) {
	_ = client.Close()
	killVM(machine)
}

// bootVM starts the container's VM, waits for the agent, prepares the
// root and, if main is not nil, starts the main process. With withNetwork
// it attaches the container's networks (the caller detaches them); a VM
// booted only to reach the container's files has no network, and so binds
// none of its published ports. On error nothing is left running or
// attached. Callers hold c.mu.
func (c *ctr) bootVM(ctx context.Context, withNetwork bool, linkHosts []string, main *proto.ProcessSpec) (_ vmm.Machine, _ *host.Client, _ *shares, _ *host.Process, err error) {
	m := c.m
	var devices []proto.Device
	if main != nil {
		if devices, err = gatherDevices(c.rec.HostConfig.Devices); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	layers, err := m.images.Layers(ctx, c.rec.ImageID)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("layers of %s: %w", c.rec.ImageID, err)
	}
	base, err := m.disks.EnsureBase(ctx, c.rec.ImageID, layers)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("base disk of %s: %w", c.rec.ImageID, err)
	}
	vmDir := c.vmDir()
	if err := os.MkdirAll(vmDir, 0o700); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("create vm dir: %w", err)
	}
	c.rec.VMDir = vmDir
	var att *husknet.Attachment
	if withNetwork {
		if att, err = c.attachNetwork(ctx, linkHosts); err != nil {
			return nil, nil, nil, nil, err
		}
		defer func() {
			if err != nil {
				c.detachNetwork(context.WithoutCancel(ctx))
			}
		}()
	}
	sh, shareDevs, mountSpecs, err := c.startShares(ctx, vmDir)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer func() {
		if err != nil {
			sh.kill(m.log)
		}
	}()
	var nets []vmm.Net
	settings := containerSettings(c.rec.HostConfig)
	settings.Devices, settings.Domainname = devices, c.rec.Config.Domainname
	setup := proto.SetupSpec{Mounts: mountSpecs, Settings: settings,
		Hostname: c.rec.Config.Hostname, BaseSerial: baseSerial, UpperSerial: upperSerial,
		Hosts: hostsFile(c.rec.Config.Hostname),
	}
	if att != nil {
		nets = att.Nets
		setup.Hosts, setup.ResolvConf, setup.DNSServer, setup.Network = att.Hosts, att.ResolvConf, att.DNSServer, att.Guest
	}
	g := m.guest
	spec := vmSpec{
		id: c.rec.ID[:12], dir: vmDir,
		memoryMiB: g.memoryMiB(c.rec.HostConfig), cpus: cpus(c.rec.HostConfig, g.CPUs),
		disks: []vmm.Disk{
			{Path: base, ReadOnly: true, Serial: baseSerial},
			{Path: filepath.Join(c.dir, upperFile), Serial: upperSerial},
		},
		nets: nets, shares: shareDevs, backends: sh.pids(),
	}
	if len(shareDevs) > 0 {
		// The same mounts give the same tags, so the setup stands.
		spec.reshare = func(ctx context.Context) ([]vmm.Share, []int, error) {
			// The new servers' start mounts the volumes again for this
			// container: they stay mounted, with what they hold.
			sh.killServers(m.log)
			first := sh
			var devs []vmm.Share
			var err error
			if sh, devs, _, err = c.startShares(ctx, vmDir); err != nil {
				first.giveBack()
				return nil, nil, err
			}
			return devs, sh.pids(), nil
		}
	}
	machine, client, err := c.startContainerVM(ctx, spec, &setup)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = client.Close()
			killVM(machine)
		}
	}()
	proc, err := c.setUpAndStart(ctx, client, setup, main)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	c.copiedUp()
	return machine, client, sh, proc, nil
}

// setUpAndStart prepares the guest's root and starts main (if not nil).
// The start is sent beside the setup rather than after its answer
// (proto.ProcessSpec.AwaitSetup): the guest, the slow side under TCG,
// then goes from one to the other without waiting on the host. A failed
// setup fails the start too, and is what is reported.
func (c *ctr) setUpAndStart(ctx context.Context, client *host.Client, setup proto.SetupSpec, main *proto.ProcessSpec) (*host.Process, error) {
	type started struct {
		proc *host.Process
		err  error
	}
	var startDone chan started
	if main != nil {
		spec := *main
		spec.AwaitSetup = true
		startDone = make(chan started, 1)
		go func() {
			proc, err := client.Start(ctx, mainProcess, spec)
			startDone <- started{proc, err}
		}()
	}
	setupStart := time.Now()
	setupErr := client.Setup(ctx, setup)
	c.m.log.Debug("guest set up", "id", c.rec.ID[:12], "took", time.Since(setupStart), "err", setupErr)
	var s started
	if startDone != nil {
		s = <-startDone
	}
	if setupErr != nil {
		return nil, fmt.Errorf("set up guest root: %w", setupErr)
	}
	return s.proc, s.err
}

// agentRetry is how often a booting guest's agent is dialled again.
const agentRetry = 50 * time.Millisecond

// reattachPatience is how long a reattach waits for the agent to answer
// one connection before it dials again (host.Reconnect); the agent of a
// running guest answers in well under a second even under TCG.
const reattachPatience = 2 * time.Second

// connectAgent opens a session with a guest's agent and pings it, which
// leaves the guest's clock alone (the floor's raw boot). Container and
// build VMs set the clock in their first request instead
// (host.ConnectWith).
func connectAgent(ctx context.Context, machine vmm.Machine) (*host.Client, error) {
	return host.Connect(ctx, machine, agentRetry)
}

// monitor pumps the main process's output into the log and attached
// clients, then records the exit and takes the VM down.
func (c *ctr) monitor(r *run) {
	ctx := context.Background()
	fwdCtx, stopForwarding := context.WithCancel(ctx)
	forwarding := c.forwardSockets(fwdCtx, r)
	var pumps sync.WaitGroup
	for _, stream := range []string{"stdout", "stderr"} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			if err := c.pump(ctx, r, stream); err != nil {
				c.m.log.Warn("output stream ended with error", "id", c.rec.ID[:12], "stream", stream, "err", err)
			}
		}()
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	watched := c.watchLockups(watchCtx, r)
	status, waitErr := r.proc.Wait(ctx)
	stopWatching()
	<-watched
	if waitErr != nil {
		waitErr = lostProcess(r, waitErr)
	}
	exitedAt := time.Now()
	stopForwarding()
	forwarding.Wait()
	pumps.Wait()
	if err := c.log.Flush(); err != nil {
		c.m.log.Error("flush log", "id", c.rec.ID[:12], "err", err)
	}
	c.hub.ended()
	outputDone := time.Now()
	vmTook, netTook := c.teardown(r)
	c.m.log.Debug("container VM taken down", "id", c.rec.ID[:12],
		"output_drained", outputDone.Sub(exitedAt), "vm", vmTook, "network", netTook, "teardown", time.Since(outputDone))

	c.mu.Lock()
	code := status.Code
	errMsg := ""
	if waitErr != nil && r.checkpointed.Load() {
		code, waitErr = checkpointExitCode, nil
	}
	if waitErr != nil && r.vmKilled.Load() {
		code, waitErr = sigkillExitCode, nil
	}
	if waitErr != nil {
		// The agent or the VM is gone: the process's fate is unknown.
		code = 255
		errMsg = waitErr.Error()
		c.m.log.Error("lost the container's main process", "id", c.rec.ID[:12], "err", waitErr)
	}
	c.stopHealthLocked()
	c.rec.State.Running = false
	c.rec.State.Paused = false
	c.rec.State.Status = container.StateExited
	c.rec.State.ExitCode = code
	c.rec.State.OOMKilled = status.OOMKilled
	c.rec.State.Error = errMsg
	c.rec.State.Pid = 0
	c.rec.State.FinishedAt = time.Now().UTC().Format(time.RFC3339Nano)
	if err := c.save(); err != nil {
		c.m.log.Error("persist exit", "id", c.rec.ID[:12], "err", err)
	} else if r.checkpointed.Load() {
		c.dropCheckpointExitNote()
	}
	c.setRun(nil)
	// Only now do docker logs -f end: the container is recorded exited.
	c.log.EndRun()
	c.notifyExit(code, errMsg)
	if status.OOMKilled {
		// dockerd says so as the kill happens; the guest tells of it with
		// the exit, so the event comes just before the die, as it does
		// there when the kill ends the container.
		c.emitLocked(events.ActionOOM, nil)
	}
	c.emitLocked(events.ActionDie, map[string]string{"exitCode": strconv.Itoa(code)})
	c.emitResourcesLocked(false)
	close(r.exited)
	autoRemove := c.rec.HostConfig.AutoRemove
	if c.wantsRestart(code) {
		c.scheduleRestart(parseTime(c.rec.State.FinishedAt).Sub(parseTime(c.rec.State.StartedAt)))
	}
	c.mu.Unlock()
	c.m.log.Info("container exited", "id", c.rec.ID[:12], "code", code)

	if autoRemove {
		// A docker rm -f that killed it is removing it already.
		var inProgress removalInProgressError
		if err := c.m.remove(context.Background(), c, c.rec.ID, RemoveOptions{RemoveVolumes: true}); err != nil && !errors.As(err, &inProgress) {
			c.m.log.Error("auto-remove", "id", c.rec.ID[:12], "err", err)
		}
	}
}

// lostProcess words why the main process's fate is unknown: the VM died
// under it, or the agent stopped answering.
func lostProcess(r *run, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if r.machine.Wait(ctx) == nil {
		return fmt.Errorf("the container's VM exited unexpectedly (VMM pid %d)", r.machine.PID())
	}
	return fmt.Errorf("lost contact with the guest agent: %w", err)
}

// pump copies one output stream of the main process to the log and to
// every attached client. It acknowledges what the log has stored (a partial
// line held in memory is not) so that the agent keeps what a crash of this
// daemon would lose, for the next daemon to read again.
func (c *ctr) pump(ctx context.Context, r *run, stream string) error {
	var (
		out *host.AckedOutput
		err error
	)
	if stream == "stdout" {
		out, err = r.proc.AckedStdout(ctx, r.resend)
	} else {
		out, err = r.proc.AckedStderr(ctx, r.resend)
	}
	if err != nil {
		return err
	}
	defer out.Close()
	w := io.MultiWriter(c.log.Writer(stream), c.hub.writer(stream))
	buf := make([]byte, 32<<10)
	var read, acked int64
	for {
		n, err := out.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			read += int64(n)
		}
		stored := read - int64(c.log.Pending(stream))
		if errors.Is(err, io.EOF) {
			// The stream is complete: its partial line is the run's last
			// and is written out when the run ends.
			stored = read
		}
		if stored > acked {
			if aerr := out.Ack(stored); aerr != nil && err == nil {
				return fmt.Errorf("acknowledge output: %w", aerr)
			}
			acked = stored
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// teardown closes the main process's stdin and takes the VM down. The
// VM of a container removed on exit is killed outright: its disks go with
// it, so the guest has nothing worth unmounting and syncing. Nor is a
// guest asked to shut down whose VM a checkpoint killed: there is no one
// to answer.
func (c *ctr) teardown(r *run) (vmTook, netTook time.Duration) {
	if r.stdin != nil {
		_ = r.stdin.Close()
	}
	// The network goes while the VM does: the main process has exited,
	// and neither waits on the other (each is 5-20 ms of the exit path).
	start := time.Now()
	detached := make(chan struct{})
	go func() {
		defer close(detached)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.detachNetwork(ctx)
		netTook = time.Since(start)
	}()
	if c.autoRemove() || r.checkpointed.Load() || r.vmKilled.Load() {
		discardVM(r.machine, r.client)
	} else {
		stopVM(c.m.log, c.rec.ID[:12], r.machine, r.client)
	}
	r.shares.stop(c.m.log)
	vmTook = time.Since(start)
	<-detached
	return vmTook, netTook
}

// recordStartFailure marks a container whose start failed as exited, with
// the exit code dockerd gives such failures. Callers hold c.mu.
func (c *ctr) recordStartFailure(err error) {
	code := 128
	var ae *host.AgentError
	if errors.As(err, &ae) {
		switch ae.Kind {
		case proto.KindNotFound:
			code = 127
		case proto.KindPermission:
			code = 126
		}
	}
	c.rec.State.Status = container.StateExited
	if c.rec.State.StartedAt == zeroTime {
		c.rec.State.Status = container.StateCreated
	}
	c.rec.State.Running = false
	c.rec.State.ExitCode = code
	c.rec.State.Error = err.Error()
	if e := c.save(); e != nil {
		c.m.log.Error("persist start failure", "id", c.rec.ID[:12], "err", e)
	}
	c.notifyExit(code, err.Error())
}

// startError words a failed start as dockerd does: an executable that
// cannot be run in runc's words, which the CLI reads to pick its exit status
// (127 for a missing executable, 126 when it can't run).
func startError(err error) error {
	var ae *host.AgentError
	if !errors.As(err, &ae) {
		return err
	}
	switch ae.Kind {
	case proto.KindNotFound, proto.KindPermission:
		return errdefs.ErrInvalidArgument.WithMessage("failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: " + ae.Message + ": unknown")
	case proto.KindUser, proto.KindInvalid:
		return errdefs.ErrInvalidArgument.WithMessage(ae.Message)
	case proto.KindConfig:
		return errors.New(ae.Message)
	}
	return fmt.Errorf("start container process: %w", err)
}

// Stop signals the main process and kills it after the timeout.
func (m *Manager) Stop(ctx context.Context, ref, signal string, timeout *int) (err error) {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	if err := c.resumeForSignal(ctx, true); err != nil {
		return err
	}
	c.mu.Lock()
	if !m.isShuttingDown() {
		c.rec.ManuallyStopped = true
	}
	c.restart.stopped = true
	if c.cancelRestart() {
		c.mu.Unlock()
		return nil
	}
	r := c.run
	running := c.rec.State.Running
	stopSignal := c.rec.Config.StopSignal
	secs := 10
	if c.rec.Config.StopTimeout != nil {
		secs = *c.rec.Config.StopTimeout
	}
	c.mu.Unlock()
	if r == nil || !running {
		return errdefs.ErrNotModified.WithMessage("Container " + ref + " is already stopped")
	}
	if timeout != nil {
		secs = *timeout
	}
	if signal == "" {
		signal = stopSignal
	}
	sig, err := ParseSignal(signal, syscall.SIGTERM)
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			c.emit(events.ActionStop, nil)
		}
	}()
	c.emit(events.ActionKill, signalAttrs(sig))
	if err := deliver(ctx, r, sig); err != nil {
		m.log.Warn("stop signal failed; killing", "id", c.rec.ID[:12], "err", err)
	} else if secs != 0 {
		var grace <-chan time.Time
		if secs > 0 {
			t := time.NewTimer(time.Duration(secs) * time.Second)
			defer t.Stop()
			grace = t.C
		}
		select {
		case <-r.exited:
			return nil
		case <-grace:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.kill(ctx, r, syscall.SIGKILL, true)
}

// kill sends sig; for SIGKILL it waits for the exit, and takes the VM down
// if the agent cannot deliver it, as dockerd's SIGKILL does not wait on
// the container either.
func (c *ctr) kill(ctx context.Context, r *run, sig syscall.Signal, wait bool) error {
	c.emit(events.ActionKill, signalAttrs(sig))
	if err := deliver(ctx, r, sig); err != nil {
		if sig != syscall.SIGKILL {
			return fmt.Errorf("signal %s: %w", c.rec.ID[:12], err)
		}
		c.m.log.Warn("agent could not deliver SIGKILL; killing the VM", "id", c.rec.ID[:12], "err", err)
		r.vmKilled.Store(true)
		_ = r.machine.Kill()
	}
	if !wait {
		return nil
	}
	select {
	case <-r.exited:
		return nil
	case <-time.After(30 * time.Second):
		// The agent acknowledged but the exit never came back.
		r.vmKilled.Store(true)
		_ = r.machine.Kill()
		<-r.exited
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deliver has the agent deliver sig to the main process, giving up after
// agentTimeout: an agent that does not answer by then is wedged with its
// guest (a guest stopped or spinning), and the caller kills the VM rather
// than hang the request.
func deliver(ctx context.Context, r *run, sig syscall.Signal) error {
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	if err := r.proc.Signal(ctx, sig); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return errAgentSilent
		}
		return err
	}
	return nil
}

// Kill sends a signal (SIGKILL by default) to the main process.
func (m *Manager) Kill(ctx context.Context, ref, signal string) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	sig, err := ParseKillSignal(signal)
	if err != nil {
		return err
	}
	if err := c.resumeForSignal(ctx, sig == syscall.SIGKILL); err != nil {
		return err
	}
	c.mu.Lock()
	r := c.run
	running := c.rec.State.Running
	if running && !m.isShuttingDown() {
		c.rec.ManuallyStopped = true
	}
	c.mu.Unlock()
	if r == nil || !running {
		// The API layer prefixes "Cannot kill container: <ref>: ".
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is not running", c.rec.ID))
	}
	return c.kill(ctx, r, sig, sig == syscall.SIGKILL)
}

// Wait registers a wait for cond and returns a channel that yields once.
func (m *Manager) Wait(ctx context.Context, ref string, cond container.WaitCondition) (<-chan container.WaitResponse, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return nil, err
	}
	ch := make(chan container.WaitResponse, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch cond {
	case "", container.WaitConditionNotRunning:
		if c.run == nil {
			ch <- waitResponse(c.rec.State.ExitCode, "")
			return ch, nil
		}
		cond = container.WaitConditionNotRunning
	case container.WaitConditionNextExit, container.WaitConditionRemoved:
	default:
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid condition: %q", cond))
	}
	c.waiters = append(c.waiters, waiter{cond: cond, ch: ch})
	return ch, nil
}

func waitResponse(code int, errMsg string) container.WaitResponse {
	resp := container.WaitResponse{StatusCode: int64(code)}
	if errMsg != "" {
		resp.Error = &container.WaitExitError{Message: errMsg}
	}
	return resp
}

// notifyExit answers every waiter but those waiting for removal. Callers
// hold c.mu.
func (c *ctr) notifyExit(code int, errMsg string) {
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.cond == container.WaitConditionRemoved {
			kept = append(kept, w)
			continue
		}
		w.ch <- waitResponse(code, errMsg)
	}
	c.waiters = kept
}

// Remove deletes a container; a running one only with Force.
func (m *Manager) Remove(ctx context.Context, ref string, opts RemoveOptions) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	return m.remove(ctx, c, ref, opts)
}

// removalInProgressError answers a removal of a container another
// removal is under way for, as dockerd does (409, naming the container
// as the caller did). Clients such as testcontainers take it for success.
type removalInProgressError string

func (e removalInProgressError) Error() string {
	return "removal of container " + string(e) + " is already in progress"
}

func (removalInProgressError) Unwrap() error { return errdefs.ErrConflict }

// remove removes c, which the caller named ref.
func (m *Manager) remove(ctx context.Context, c *ctr, ref string, opts RemoveOptions) (err error) {
	c.mu.Lock()
	r := c.run
	if c.removed {
		c.mu.Unlock()
		return nil
	}
	if c.rec.RemovalInProgress {
		c.mu.Unlock()
		return removalInProgressError(ref)
	}
	if c.busy {
		c.mu.Unlock()
		return errBusy(c.rec.ID)
	}
	c.restart.stopped = true
	c.cancelRestart()
	if r != nil && !opts.Force {
		paused := c.rec.State.Paused
		c.mu.Unlock()
		if paused {
			return errdefs.ErrConflict.WithMessage(fmt.Sprintf("You cannot remove a paused container %s. Unpause and then stop the container before attempting removal or force remove", c.rec.ID))
		}
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("You cannot remove a running container %s. Stop the container before attempting removal or force remove", c.rec.ID))
	}
	c.rec.RemovalInProgress = true
	if err := c.save(); err != nil {
		c.rec.RemovalInProgress = false
		c.mu.Unlock()
		return fmt.Errorf("remove container %s: %w", c.rec.ID, err)
	}
	c.mu.Unlock()
	m.log.Debug("removing container", "id", c.rec.ID[:12], "force", opts.Force, "running", r != nil)
	defer func() {
		if err == nil {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.removed {
			c.rec.RemovalInProgress = false
			if err := c.save(); err != nil {
				m.log.Error("persist a removal that failed", "id", c.rec.ID[:12], "err", err)
			}
		}
	}()
	if r != nil {
		if err := c.resumeForSignal(ctx, true); err != nil {
			return err
		}
		if err := c.kill(ctx, r, syscall.SIGKILL, true); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return nil
	}
	if c.run != nil {
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("container %s was restarted during removal", c.rec.ID))
	}
	c.removed = true
	_ = c.log.Close()
	m.releaseVolumes(ctx, c.rec.ID, c.rec.Mounts, opts.RemoveVolumes)
	// The record goes first: a crash mid-way leaves a directory without a
	// record, which New cleans up, never a record without its disks.
	if err := os.Remove(filepath.Join(c.dir, recordFile)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove container %s: %w", c.rec.ID, err)
	}
	if err := os.RemoveAll(c.dir); err != nil {
		m.log.Warn("remove container dir", "dir", c.dir, "err", err)
	}
	m.execs.dropContainer(c)
	m.mu.Lock()
	delete(m.byID, c.rec.ID)
	if m.byName[c.rec.Name] == c {
		delete(m.byName, c.rec.Name)
	}
	m.mu.Unlock()
	for _, w := range c.waiters {
		w.ch <- waitResponse(c.rec.State.ExitCode, "")
	}
	c.waiters = nil
	c.emitLocked(events.ActionDestroy, nil)
	m.log.Info("container removed", "id", c.rec.ID[:12])
	return nil
}

// Restore brings back containers that were running when the daemon went
// away: their VMMs survive it, so the runtime reattaches to the VMM and
// opens a new agent session; a container whose VM is gone is marked exited.
// It starts nothing: RestartOnBoot does that once the networks are up.
//
// A --rm container that does not run after this is removed, as dockerd
// removes one at its start: its removal was due when its process ended,
// and no daemon was there to carry it out (or it never started, and no
// later daemon will remove it for it).
func (m *Manager) Restore(ctx context.Context) {
	var autoRemove []*ctr
	idle := map[string][]string{} // container ID: volumes
	for _, c := range m.all() {
		c.mu.Lock()
		c.restoreAfterRestart(ctx)
		if c.run == nil {
			idle[c.rec.ID] = c.volumeNames()
			if c.rec.HostConfig.AutoRemove {
				autoRemove = append(autoRemove, c)
			}
		}
		c.mu.Unlock()
	}
	// Once every container that runs on has its volumes mounted again,
	// what only stopped ones used is unmounted: their VMs ended while
	// no daemon was there to.
	if m.volumes != nil {
		for id, names := range idle {
			for _, name := range names {
				m.volumes.Unmount(name, id)
			}
		}
	}
	for _, c := range autoRemove {
		m.log.Info("removing a --rm container that is not running after the daemon restart", "id", c.rec.ID[:12])
		if err := m.remove(ctx, c, c.rec.ID, RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			m.log.Error("auto-remove after the daemon restart", "id", c.rec.ID[:12], "err", err)
		}
	}
}

// restoreAfterRestart is Restore for one container. Callers hold c.mu.
func (c *ctr) restoreAfterRestart(ctx context.Context) {
	m := c.m
	if c.rec.RemovalInProgress {
		c.markDead(ctx)
		return
	}
	if !c.rec.State.Running {
		c.killStrayVM(ctx, "killing the VM of a start the previous daemon did not finish")
		return
	}
	if err := c.reattach(ctx); err != nil {
		m.log.Warn("container did not survive the daemon restart", "id", c.rec.ID[:12], "err", err)
		if c.rec.VMDir != "" {
			// virtiofsd outlives a VMM killed while the daemon was away
			// only until it notices; make sure.
			m.findShares(c.rec.VMDir).kill(m.log)
		}
		c.rec.State = lostState(c.dir, c.rec.State.StartedAt)
		if err := c.save(); err != nil {
			m.log.Error("persist restored state", "id", c.rec.ID[:12], "err", err)
			return
		}
	}
	// Recorded, or the VM runs on: the checkpoint did not stop it.
	c.dropCheckpointExitNote()
}

// markDead is Restore for a container the previous daemon died removing.
// dockerd marks such a container dead, to be removed by a docker rm: it
// cannot know which volumes the removal was to take with it. A VM still
// running is killed, as the removal began by killing it (only a forced
// removal finds one), and the exit is recorded as that SIGKILL's. Callers
// hold c.mu.
func (c *ctr) markDead(ctx context.Context) {
	st := c.rec.State
	c.killStrayVM(ctx, "killing the VM of a container the previous daemon was removing")
	if st.Running {
		st.ExitCode, st.Error = sigkillExitCode, ""
		st.FinishedAt = time.Now().UTC().Format(time.RFC3339Nano)
	}
	c.dropCheckpointExitNote()
	c.rec.State = container.State{Status: container.StateDead, Dead: true, ExitCode: st.ExitCode, Error: st.Error,
		StartedAt: st.StartedAt, FinishedAt: st.FinishedAt}
	c.rec.RemovalInProgress = false
	if err := c.save(); err != nil {
		c.m.log.Error("persist a dead container", "id", c.rec.ID[:12], "err", err)
		return
	}
	c.m.log.Warn("container marked dead: the previous daemon did not finish removing it", "id", c.rec.ID[:12])
}

// vmDir is where the container's VMM runs, whether booted, restored
// from a template or from a checkpoint.
func (c *ctr) vmDir() string { return filepath.Join(c.dir, "vm") }

// killStrayVM ends a VMM left running for a container the daemon does
// not run: one the previous daemon died while starting, before it
// recorded the container running, or one it died removing (markDead).
// Nothing else would end it, and the container's next start would find
// its VM directory taken. why is what the warning says. Callers hold
// c.mu.
func (c *ctr) killStrayVM(ctx context.Context, why string) {
	if c.m.guest.Driver == nil {
		return
	}
	vmDir := c.vmDir()
	machine, err := c.m.guest.Driver.Reattach(ctx, vmDir)
	if err != nil {
		return
	}
	c.m.log.Warn(why, "id", c.rec.ID[:12], "vmm_pid", machine.PID())
	killVM(machine)
	c.m.findShares(vmDir).kill(c.m.log)
}

// lostState is the state of a container whose VM is gone after a daemon
// restart: exited by the checkpoint that was stopping it when the daemon
// died (checkpointExitFile), else lost.
func lostState(dir, startedAt string) container.State {
	st := container.State{Status: container.StateExited, ExitCode: 255,
		StartedAt: startedAt, FinishedAt: time.Now().UTC().Format(time.RFC3339Nano),
		Error: "the VM did not survive the daemon restart"}
	if _, err := os.Stat(filepath.Join(dir, checkpointExitFile)); err == nil {
		st.ExitCode, st.Error = checkpointExitCode, ""
	}
	return st
}

// dropCheckpointExitNote drops the note that a checkpoint was stopping
// the container, once its exit is on record or its VM found running.
func (c *ctr) dropCheckpointExitNote() {
	if err := os.Remove(filepath.Join(c.dir, checkpointExitFile)); err != nil && !os.IsNotExist(err) {
		c.m.log.Warn("remove checkpoint stop note", "id", c.rec.ID[:12], "err", err)
	}
}

// reattach is Restore for one container. Callers hold c.mu.
func (c *ctr) reattach(ctx context.Context) error {
	if c.rec.VMDir == "" {
		return errors.New("no VM recorded")
	}
	machine, err := c.m.guest.Driver.Reattach(ctx, c.rec.VMDir)
	if err != nil {
		return fmt.Errorf("reattach VMM: %w", err)
	}
	// A daemon killed mid-checkpoint left its VM paused (the driver also
	// cancels a snapshot still under way), and so did one that paused a
	// container whose agent could not freeze it; a paused guest cannot
	// answer: resume it to reattach, and pause it again below.
	if err := machine.Resume(ctx); err != nil {
		return fmt.Errorf("resume VM to reattach: %w", err)
	}
	readyCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A ping first: the VM may run an agent older than this daemon, whose
	// protocol version the ping checks. The dead daemon's connection may
	// have left the agent's channel stuck, which a new dial clears.
	client, err := host.Reconnect(readyCtx, machine, reattachPatience, c.m.log)
	if err != nil {
		_ = machine.Kill()
		_ = machine.Cleanup()
		return err
	}
	// Its clock stood still for as long as it was paused.
	if err := client.Freshen(readyCtx, nil); err != nil {
		c.m.log.Warn("set the reattached guest's clock", "id", c.rec.ID[:12], "err", err)
	}
	r := &run{machine: machine, client: client, proc: client.Process(mainProcess), shares: c.adoptShares(ctx),
		exited: make(chan struct{}), resend: true}
	if c.rec.State.Paused {
		// Frozen again, or for the first time if the dead daemon only
		// stopped the VM.
		if err := c.pauseLocked(readyCtx, r); err != nil {
			c.m.log.Error("pause the reattached container again", "id", c.rec.ID[:12], "err", err)
		}
	} else if err := c.thawProcesses(readyCtx, client, "snapshot"); err != nil {
		// Its processes stay frozen if the daemon died between a
		// checkpoint's freeze and its thaw.
		c.m.log.Warn("thaw the reattached container's processes", "id", c.rec.ID[:12], "err", err)
	}
	if c.rec.Config.OpenStdin {
		if r.stdin, err = r.proc.Stdin(ctx); err != nil {
			c.m.log.Warn("reopen stdin", "id", c.rec.ID[:12], "err", err)
		}
	}
	c.setRun(r)
	c.startHealthLocked()
	c.hub.started(r.stdin)
	go c.monitor(r)
	c.m.log.Info("container reattached", "id", c.rec.ID[:12])
	return nil
}

// Shutdown stops every running container, as dockerd does on SIGTERM
// without live-restore.
func (m *Manager) Shutdown(ctx context.Context) {
	m.mu.Lock()
	m.shuttingDown = true
	var running []*ctr
	for _, c := range m.byID {
		if c != nil {
			running = append(running, c)
		}
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range running {
		c.mu.Lock()
		active := c.run != nil
		c.mu.Unlock()
		if !active {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Stop(ctx, c.rec.ID, "", nil); err != nil && !errdefs.IsNotModified(err) {
				m.log.Warn("stop on shutdown", "id", c.rec.ID[:12], "err", err)
			}
		}()
	}
	wg.Wait()
}

// ParseSignal reads a signal as dockerd does, with its table
// (moby/sys/signal): by name with or without SIG (RTMIN+3 too, which
// systemd images stop with) or by number; "" is def.
func ParseSignal(s string, def syscall.Signal) (syscall.Signal, error) {
	if s == "" {
		return def, nil
	}
	sig, err := sigtable.ParseSignal(s)
	if err != nil {
		// dockerd 20.10's capital; the table's own words are lowercase.
		return 0, errdefs.ErrInvalidArgument.WithMessage("Invalid signal: " + s)
	}
	return sig, nil
}

// ParseKillSignal reads docker kill's signal (SIGKILL when ""): a number
// must also be a signal Linux has, which dockerd 20.10 checks once it
// has found the container.
func ParseKillSignal(s string) (syscall.Signal, error) {
	sig, err := ParseSignal(s, syscall.SIGKILL)
	if err != nil {
		return 0, err
	}
	if !sigtable.ValidSignalForPlatform(sig) {
		return 0, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("The linux daemon does not support signal %d", sig))
	}
	return sig, nil
}

// minGuestMiB is the least guest RAM a container VM gets, whatever its
// --memory: below it the guest cannot boot. Debian's cloud kernel with
// husk's initramfs ran out of memory at boot in 64 MiB (a panic while it
// set up tracefs) and booted busybox in 80 MiB; 96 leaves the container
// a little room.
const minGuestMiB = 96

// guestOverheadMiB is what a guest holds beside its container: the
// kernel's reserved memory (~35 MiB plus ~1.3% of the RAM: its page
// structures), the kernel's and agent's own use (~21 MiB) and the
// initramfs (~18 MiB), as measured in 96, 256 and 512 MiB guests. A
// container with --memory gets that much more RAM than its limit, which
// its cgroup in the guest keeps (proto.ContainerSettings.MemoryLimit), so
// that it can use all of the limit, as under runc.
func guestOverheadMiB(limitMiB int) int { return 80 + limitMiB/64 }

// memoryMiB is the RAM of a container's VM: --memory and the guest's
// overhead, or the daemon's default without a limit. It is never more
// than hostMiB, the host's RAM (0: not known): a limit beyond it limits
// nothing under runc either, where QEMU could not reserve it at all
// ("cannot set up guest memory 'pc.ram'"); the guest's cgroup keeps the
// limit as given.
func memoryMiB(hc *container.HostConfig, def, hostMiB int) int {
	if hc != nil && hc.Memory > 0 {
		// Rounded up without the overflow of adding first.
		limit := hc.Memory >> 20
		if hc.Memory&(1<<20-1) != 0 {
			limit++
		}
		limit = min(limit, math.MaxInt32)
		mem := max(int(limit)+guestOverheadMiB(int(limit)), minGuestMiB)
		if hostMiB > 0 {
			mem = min(mem, max(hostMiB, minGuestMiB))
		}
		return mem
	}
	return def
}

// memoryMiB is the RAM of a VM for a container configured as hc.
func (g Guest) memoryMiB(hc *container.HostConfig) int {
	return memoryMiB(hc, g.MemoryMiB, g.HostMemoryMiB)
}

func cpus(hc *container.HostConfig, def int) int {
	if hc != nil && hc.NanoCPUs > 0 {
		// Rounded up without the overflow of adding first.
		n := hc.NanoCPUs / 1_000_000_000
		if hc.NanoCPUs%1_000_000_000 != 0 {
			n++
		}
		return int(n)
	}
	return def
}

// processEnv is the main process's environment, as dockerd builds it
// (CreateDaemonEnvironment): the default PATH, HOSTNAME, TERM with a tty
// and the links' variables, in that order, then the container's own,
// each of which replaces the default of its name in place.
func processEnv(cfg *container.Config, linked []string) []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=" + cfg.Hostname}
	if cfg.Tty {
		env = append(env, "TERM=xterm")
	}
	env = append(env, linked...)
	return mergeEnv(env, cfg.Env)
}

func hostsFile(hostname string) string {
	return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n127.0.1.1\t" + hostname + "\n"
}
