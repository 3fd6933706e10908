package containers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/events"

	"github.com/husk-vm/husk/rootfs"
	husknet "github.com/husk-vm/husk/runtime/network"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// BuildVMOptions configure BuildVMs.
type BuildVMOptions struct {
	// Root holds one directory per running build VM.
	Root   string
	Images Images
	Disks  Disks
	Guest  Guest
	// Network connects build VMs as dockerd connects its build
	// containers; nil boots them with loopback only.
	Network Network
	// Events receives the events of the intermediate containers dockerd
	// would run a build's steps in (BuildVMs.ContainerEvent).
	Events EventSink
	Logger *slog.Logger
}

// BuildNetwork is how a build VM's RUN steps reach the network: docker
// build's --network and --add-host.
type BuildNetwork struct {
	// Mode is "" or "default" (the default bridge), "none", or a
	// network's name or ID.
	Mode string
	// ExtraHosts are --add-host entries, "name:ip".
	ExtraHosts []string
}

// BuildVMs boots the VMs that Dockerfile RUN steps execute in. A build VM
// boots like a container's, with an image's base disk and a fresh upper
// disk, but it is the builder's: it runs one process after another on the
// same root and turns the root's changes into layers (proto.OpCutLayer).
// Build VMs are not containers: they have no record and do not survive the
// daemon.
type BuildVMs struct {
	opts BuildVMOptions
	log  *slog.Logger
}

// NewBuildVMs prepares opts.Root. Directories left there by a daemon that
// died mid-build are removed; their VMMs are found and killed first.
func NewBuildVMs(ctx context.Context, opts BuildVMOptions) (*BuildVMs, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(opts.Root, 0o700); err != nil {
		return nil, fmt.Errorf("create build VM root: %w", err)
	}
	ents, err := os.ReadDir(opts.Root)
	if err != nil {
		return nil, fmt.Errorf("list build VMs: %w", err)
	}
	for _, e := range ents {
		dir := filepath.Join(opts.Root, e.Name())
		if m, err := opts.Guest.Driver.Reattach(ctx, filepath.Join(dir, "vm")); err == nil {
			log.Warn("killing the VM of an interrupted build", "dir", dir)
			killVM(m)
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("remove stale build VM dir", "dir", dir, "err", err)
		}
	}
	return &BuildVMs{opts: opts, log: log}, nil
}

// emptyBaseID names the base disk of build VMs for FROM scratch: an image
// ID no real image can have, as it is not the digest of a config.
var emptyBaseID = func() string {
	sum := sha256.Sum256([]byte("husk: the empty base of build VMs"))
	return "sha256:" + hex.EncodeToString(sum[:])
}()

// BuildVM is one running build VM. Its methods must not be called
// concurrently.
type BuildVM struct {
	vms *BuildVMs
	id  string
	// fullID names the VM's network attachment.
	fullID  string
	dir     string
	machine vmm.Machine
	client  *host.Client

	mu     sync.Mutex
	runs   int
	closed bool
}

// Start boots a build VM whose root is the filesystem of image
// baseImageID, or empty when baseImageID is "", connected as net says.
func (b *BuildVMs) Start(ctx context.Context, baseImageID string, net BuildNetwork) (_ *BuildVM, err error) {
	var base string
	if baseImageID == "" {
		base, err = b.opts.Disks.EnsureBase(ctx, emptyBaseID, nil)
	} else {
		var layers []rootfs.LayerOpener
		if layers, err = b.opts.Images.Layers(ctx, baseImageID); err == nil {
			base, err = b.opts.Disks.EnsureBase(ctx, baseImageID, layers)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("base disk of %s: %w", baseImageID, err)
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.opts.Root, id)
	vmDir := filepath.Join(dir, "vm")
	if err := os.MkdirAll(vmDir, 0o700); err != nil {
		return nil, fmt.Errorf("create build VM dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	upper := filepath.Join(dir, upperFile)
	g := b.opts.Guest
	if err := b.opts.Disks.NewUpper(ctx, upper, g.UpperSize); err != nil {
		return nil, fmt.Errorf("create build VM disk: %w", err)
	}
	short := id[:12]
	setup := proto.SetupSpec{Hostname: short, BaseSerial: baseSerial, UpperSerial: upperSerial, Hosts: hostsFile(short)}
	var nets []vmm.Net
	if b.opts.Network != nil {
		var att *husknet.Attachment
		if att, err = b.attach(ctx, id, short, net); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				b.detach(id)
			}
		}()
		nets = att.Nets
		setup.Hosts, setup.ResolvConf, setup.DNSServer, setup.Network = att.Hosts, att.ResolvConf, att.DNSServer, att.Guest
	}
	machine, client, err := g.startVM(ctx, b.log, vmSpec{
		id: short, dir: vmDir, memoryMiB: g.MemoryMiB, cpus: g.CPUs,
		disks: []vmm.Disk{{Path: base, ReadOnly: true, Serial: baseSerial}, {Path: upper, Serial: upperSerial}},
		nets:  nets,
	})
	if err != nil {
		return nil, err
	}
	if err := client.Setup(ctx, setup); err != nil {
		stopVM(b.log, short, machine, client)
		return nil, fmt.Errorf("set up build VM root: %w", err)
	}
	b.log.Info("build VM started", "id", short, "base", baseImageID, "network", net.Mode, "vmm_pid", machine.PID())
	return &BuildVM{vms: b, id: short, fullID: id, dir: dir, machine: machine, client: client}, nil
}

// attach connects a build VM as dockerd connects a build container: to
// the default bridge unless the build names a network, with the
// container's /etc/hosts and /etc/resolv.conf. A network that does not
// exist fails the RUN in dockerd's words ("network x not found").
func (b *BuildVMs) attach(ctx context.Context, id, hostname string, net BuildNetwork) (*husknet.Attachment, error) {
	nets, err := b.opts.Network.Configure(net.Mode, nil)
	if err != nil {
		return nil, err
	}
	return b.opts.Network.Attach(ctx, husknet.Request{
		ContainerID: id, Hostname: hostname, Networks: nets, ExtraHosts: net.ExtraHosts,
	})
}

// detach releases what attach took, once the VM is gone.
func (b *BuildVMs) detach(id string) {
	if err := b.opts.Network.Detach(context.Background(), id); err != nil {
		b.log.Warn("detach build VM network", "id", id[:12], "err", err)
	}
}

// ApplyLayer stacks an OCI layer tar on the VM's root.
func (v *BuildVM) ApplyLayer(ctx context.Context, r io.Reader) error {
	return v.client.ApplyLayer(ctx, r)
}

// PutFiles extracts a tar into the VM's root as changes, keeping its
// owners: a step's mount sources, which the step's process removes.
func (v *BuildVM) PutFiles(ctx context.Context, r io.Reader) error {
	return v.client.ArchivePut(ctx, proto.ArchiveSpec{Path: "/"}, r)
}

// CutLayer writes the root's changes since the last cut or applied layer
// as an OCI layer tar.
func (v *BuildVM) CutLayer(ctx context.Context, w io.Writer) error {
	return v.client.CutLayer(ctx, w)
}

// Run runs spec to its end, copying its output to stdout and stderr, and
// returns its exit code. If ctx ends first the process is killed.
func (v *BuildVM) Run(ctx context.Context, spec proto.ProcessSpec, stdout, stderr io.Writer) (int, error) {
	v.mu.Lock()
	v.runs++
	pid := "run-" + strconv.Itoa(v.runs)
	v.mu.Unlock()
	spec.Stdin, spec.Terminal = false, false
	proc, err := v.client.Start(ctx, pid, spec)
	if err != nil {
		var ae *host.AgentError
		if errors.As(err, &ae) {
			switch ae.Kind {
			case proto.KindUser:
				// dockerd looks the user up itself, before runc.
				return 0, errdefs.ErrInvalidArgument.WithMessage(ae.Message)
			case proto.KindNotFound, proto.KindPermission:
				// dockerd's words, as for a container that cannot start.
				return 0, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: %s: unknown", ae.Message))
			}
		}
		return 0, err
	}
	var wg sync.WaitGroup
	for _, s := range []struct {
		open func(context.Context) (io.ReadCloser, error)
		w    io.Writer
	}{{proc.Stdout, stdout}, {proc.Stderr, stderr}} {
		rc, err := s.open(ctx)
		if err != nil {
			v.kill(proc, pid)
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rc.Close()
			_, _ = io.Copy(s.w, rc)
		}()
	}
	stop := context.AfterFunc(ctx, func() {
		// Logged before the kill so that a build VM left running shows
		// whether the end of its build ever reached it.
		v.vms.log.Info("build ended while a process ran; killing it", "vm", v.id, "process", pid, "cause", context.Cause(ctx))
		v.kill(proc, pid)
	})
	defer stop()
	status, err := proc.Wait(context.WithoutCancel(ctx))
	wg.Wait()
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("wait for %s: %w", pid, err)
	}
	if err := proc.Forget(context.WithoutCancel(ctx)); err != nil {
		v.vms.log.Warn("forget build process", "vm", v.id, "process", pid, "err", err)
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return status.Code, nil
}

// kill ends a build process with SIGKILL. An agent that does not answer
// within agentTimeout is wedged with its guest, and the process's Wait
// would wait on it for good, with the build VM left running: the VM is
// killed instead, which ends the process and its Wait. An agent that
// answers with an error (the process has just ended) is left alone.
func (v *BuildVM) kill(proc *host.Process, pid string) {
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	var answered *host.AgentError
	if err := proc.Signal(ctx, syscall.SIGKILL); err != nil && !errors.As(err, &answered) {
		v.vms.log.Warn("agent could not deliver SIGKILL to a build process; killing the build VM", "vm", v.id, "process", pid, "err", err)
		_ = v.machine.Kill()
	}
}

// Close powers the VM off and removes its disk. Closing twice is a no-op.
func (v *BuildVM) Close(ctx context.Context) error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil
	}
	v.closed = true
	v.mu.Unlock()
	stopVM(v.vms.log, v.id, v.machine, v.client)
	if v.vms.opts.Network != nil {
		v.vms.detach(v.fullID)
	}
	if err := os.RemoveAll(v.dir); err != nil {
		return fmt.Errorf("remove build VM dir: %w", err)
	}
	v.vms.log.Info("build VM stopped", "id", v.id)
	return nil
}

// IntermediateName names a build step's intermediate container, as
// dockerd names any container it is given no name for.
func (b *BuildVMs) IntermediateName() string { return generateName(0) }

// ContainerEvent publishes an event of a build step's intermediate
// container. Build VMs are not containers: their steps' events are what
// docker events shows of dockerd's intermediate containers.
func (b *BuildVMs) ContainerEvent(action events.Action, id string, attrs map[string]string) {
	if b.opts.Events != nil {
		b.opts.Events.Publish(events.ContainerEventType, action, id, attrs)
	}
}

// NetworkEvent publishes the connect or disconnect of a step's
// intermediate container to the build's network, mode as docker build's
// --network gives it: the network the build VM was attached to (attach).
func (b *BuildVMs) NetworkEvent(action events.Action, mode, containerID string) {
	if b.opts.Events == nil || b.opts.Network == nil {
		return
	}
	nets, err := b.opts.Network.Configure(mode, nil)
	if err != nil {
		return
	}
	for name := range nets {
		publishNetworkEvent(b.opts.Events, b.opts.Network, action, name, containerID)
	}
}
