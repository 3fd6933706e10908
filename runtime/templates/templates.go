// Package templates starts container VMs from snapshots of guests that
// were booted once, which is several times faster than booting them.
//
// A template is a guest of one shape (VMM build, kernel and initramfs
// digests, command line, memory, vCPUs, accelerator, NIC count, disk
// slots) booted to agent-ready with its NICs and, where the driver has
// removable disks, two empty ones (Options.Slots), then snapshotted.
// Starting a container from it restores the snapshot into a new VMM with
// the container's TAPs, puts the container's base and upper disks into
// the empty removable disks as their media (or hot-plugs them), opens an
// agent session and refreshes the guest (wall clock, RNG reseeded with
// host entropy); the caller then sends the usual OpSetup, which gives the
// NICs the container's MACs and addresses (InterfaceSpec.DeviceMAC names
// the template's), sets the hostname, /etc files and mounts the disks.
//
// Why not the template's own disks, swapped for the container's files at
// restore: a migration stream carries device state, not disk contents,
// so a restore can open other files in place of the template's, but the
// guest kernel keeps what it learnt from the template's files — their
// capacity (read once at probe; virtio-blk only re-reads it on a config
// change QEMU raises for block_resize, which a read-only base refuses)
// and the block-device page cache filled by the partition scan at probe.
// A base of another size would be cut short or read stale. A removable
// disk's medium changes as a SCSI unit attention, on which the guest
// re-reads the capacity and drops its cache when it next opens the disk,
// with no probe; a hot-plugged disk is probed afresh (about 0.2 s under
// TCG for two disks, mostly the SCSI probe; virtio-blk disks took an
// ACPI PCI hot-plug each, 0.4-0.5 s for two). Either way the guest sees
// exactly the container's disk, and the agent finds it by its serial.
// Devices have fixed PCI slots and SCSI targets (runtime/vmm/qemu), so a
// container started from a template can be checkpointed and restored
// like any other.
//
// Where the driver can, the template guest's RAM is a file
// (vmm.Config.FileMemory; cloud-hypervisor cannot, and keeps RAM in the
// snapshot, which huskd has it restore lazily instead): its
// snapshot holds only device state, and each restore maps the file
// copy-on-write. A restore thus reads no RAM up front (QEMU loaded a
// 78-107 MB stream in 230-300 ms under TCG before), the guest's pages come
// in from the host's page cache as it touches them, and every VM of a
// template shares the pages it has not written (a template-started
// sandbox's own guest RAM fell from ~124 to ~36 MiB resident).
//
// A shape template is the same for every image; an image template
// (image.go, StartImage) is a shape template restored once more with an
// image's disks and its root mounted, from which a container whose upper
// disk is still fresh starts without mounting anything.
//
// Templates are built in the background: at daemon start for the default
// shape (Prepare), and lazily for any other shape the first time a
// container asks for it; until one is ready containers boot cold. They are
// cached under Dir by a digest of their Key, so a new QEMU, kernel or
// initramfs (a new husk-agent) gives new templates, and stale ones are
// removed when the Manager opens. A template that fails to build is not
// retried until the daemon restarts.
package templates

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/renameio/v2"
	"golang.org/x/sync/errgroup"

	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/runtime/network"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
	"github.com/husk-vm/husk/shim/host"
)

// Files of a template directory (Dir/<key digest>/).
const (
	metaFile    = "template.json"
	snapshotDir = "vm"
	// buildPrefix marks directories of builds under way; a daemon that
	// died mid-build leaves them, and New removes them.
	buildPrefix = ".build-"
	// tapsFile in a build directory names the TAPs the build made, written
	// before each is made so that New can remove them after a crash.
	tapsFile = "taps"
)

// format is how templates are made: 2 keeps the guest's RAM in a file
// that restores map copy-on-write (vmm.Config.FileMemory); templates of
// format 1 carried it in the snapshot's stream. 3: the guest booted on
// the VMM's current CPU model (QEMU under TCG dropped ERMS), which its
// restores keep. Templates of an older format are rebuilt.
const format = 3

// Key is what a template fits: a VM restored from it has exactly these.
type Key struct {
	Format    int    `json:"format"`
	VMM       string `json:"vmm"` // driver name and version
	Kernel    string `json:"kernel"`
	Initramfs string `json:"initramfs"`
	Cmdline   string `json:"cmdline"`
	Accel     string `json:"accel"`
	MemoryMiB int    `json:"memoryMiB"`
	CPUs      int    `json:"cpus"`
	NICs      int    `json:"nics"`
	// Slots are the template's empty removable disks (Options.Slots).
	Slots []vmm.Disk `json:"slots,omitempty"`
}

// unshaped is k without its shape (memory, vCPUs, NICs): the part the
// daemon fixes, as baseKey gives it.
func (k Key) unshaped() Key {
	k.MemoryMiB, k.CPUs, k.NICs = 0, 0, 0
	return k
}

// digest names the key's directory.
func (k Key) digest() string { return digestOf(k) }

func digestOf(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// meta is a template's record on disk.
type meta struct {
	Key Key `json:"key"`
	// MACs are the template's NICs' addresses, which its restores keep
	// until the agent sets the container's.
	MACs    []string  `json:"macs"`
	Created time.Time `json:"created"`
	// Image is what an image template fits beyond Key; nil for a shape
	// template.
	Image *ImageKey `json:"image,omitempty"`
	// used is when a container last started from it in this daemon.
	used time.Time
}

// lastUse is when the template was last made or used.
func (md meta) lastUse() time.Time {
	if md.used.After(md.Created) {
		return md.used
	}
	return md.Created
}

// DiskAttacher is what a VMM's machine must offer for templates: disks
// hot-plugged after a restore (qemu.Machine has it).
type DiskAttacher interface {
	AttachDisks(ctx context.Context, disks []vmm.Disk) error
}

// Taps makes and removes the throwaway TAP devices a template boot needs
// (its NICs must be backed while it boots; its restores get the
// containers' own).
type Taps interface {
	Add(name string) error
	Delete(name string) error
}

// Options configure a Manager.
type Options struct {
	// Dir holds the templates; created if missing.
	Dir       string
	Driver    vmm.Driver
	Kernel    string
	Initramfs string
	Cmdline   string
	Accel     string
	// ReadyTimeout bounds a template boot to agent-ready.
	ReadyTimeout time.Duration
	// RestoreTimeout bounds a restore to the agent's answer (default
	// DefaultRestoreTimeout). A restored agent answers in well under a
	// second, and a start whose restore fails boots the container
	// another way, so a guest that hangs once restored costs seconds, not
	// the minutes a cold boot may be given.
	RestoreTimeout time.Duration
	// KernelSymbol names a guest kernel address ("" for none), for the
	// report of a guest that hung; nil leaves addresses bare.
	KernelSymbol func(pc uint64) string
	// Taps defaults to network.UnbridgedTaps.
	Taps Taps
	// Disks, when set, has every template warmed (Warm) before it is
	// snapshotted, on blank disks of WarmDiskSize bytes; a driver whose
	// machines cannot unplug disks builds its templates unwarmed.
	Disks        Disks
	WarmDiskSize int64
	// Slots, when set, are empty removable disks (vmm.Disk.Removable)
	// every template boots with, into which a restore inserts the
	// container's disks of the same serials and access, where without
	// them it hot-plugs the disks (see the package doc). Only drivers
	// with removable disks take them.
	Slots []vmm.Disk
	// ImageTemplates is how many image templates (StartImage) are kept
	// at most: 0 is the default of 8, negative none.
	ImageTemplates int
	Logger         *slog.Logger
}

// Manager builds, caches and restores templates.
type Manager struct {
	opts Options
	log  *slog.Logger
	// ctx ends background builds when the Manager closes.
	ctx    context.Context
	cancel context.CancelFunc
	builds sync.WaitGroup
	// buildSlot lets one build run at a time; a channel rather than a
	// mutex so a build waiting for its turn still sees the Manager close.
	buildSlot chan struct{}

	mu      sync.Mutex
	ready   map[string]meta     // by key digest
	pending map[string]struct{} // building
	failed  map[string]error
	digests kernel.BootDigests
	// noImages: the VMM cannot make image templates (its restores cannot
	// write their RAM through to a file), so none is tried again.
	noImages bool
}

// New opens the template cache in opts.Dir, dropping templates that no
// longer fit this daemon (another VMM build, kernel or initramfs) and
// builds left unfinished.
func New(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Driver == nil || opts.Kernel == "" || opts.Initramfs == "" || opts.Dir == "" {
		return nil, fmt.Errorf("templates: driver, kernel, initramfs and dir are required: %w", errdefs.ErrInvalidArgument)
	}
	if opts.Taps == nil {
		opts.Taps = network.UnbridgedTaps{}
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	if opts.RestoreTimeout == 0 {
		opts.RestoreTimeout = DefaultRestoreTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create template dir: %w", err)
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Manager{opts: opts, log: log, ctx: bctx, cancel: cancel, buildSlot: make(chan struct{}, 1),
		ready: map[string]meta{}, pending: map[string]struct{}{}, failed: map[string]error{}}
	base, err := m.baseKey(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	if err := m.load(ctx, base); err != nil {
		cancel()
		return nil, err
	}
	return m, nil
}

// load reads the cache, removing what does not fit base.
func (m *Manager) load(ctx context.Context, base Key) error {
	entries, err := os.ReadDir(m.opts.Dir)
	if err != nil {
		return fmt.Errorf("list templates: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(m.opts.Dir, e.Name())
		var md meta
		b, err := os.ReadFile(filepath.Join(dir, metaFile))
		if err == nil {
			err = json.Unmarshal(b, &md)
		}
		stale := err != nil || strings.HasPrefix(e.Name(), buildPrefix) || dirName(md.Key, md.Image) != e.Name() ||
			md.Key.unshaped().digest() != base.digest()
		if !stale && md.Image != nil {
			err = md.Image.Base.check()
			stale = err != nil
		}
		if strings.HasPrefix(e.Name(), buildPrefix) {
			m.abandonBuild(ctx, dir)
		}
		if stale {
			m.log.Debug("removing a template that no longer fits", "dir", dir, "err", err)
			if err := os.RemoveAll(dir); err != nil {
				m.log.Warn("remove stale template", "dir", dir, "err", err)
			}
			continue
		}
		m.ready[e.Name()] = md
	}
	return nil
}

// abandonBuild ends what a build that a dead daemon left behind still
// holds: its VMM (which outlives the daemon) and its TAPs.
func (m *Manager) abandonBuild(ctx context.Context, dir string) {
	if machine, err := m.opts.Driver.Reattach(ctx, filepath.Join(dir, "run")); err == nil {
		discard(machine)
	}
	b, _ := os.ReadFile(filepath.Join(dir, tapsFile))
	for _, tap := range strings.Fields(string(b)) {
		if err := m.opts.Taps.Delete(tap); err != nil {
			m.log.Warn("remove tap of an unfinished template build", "tap", tap, "err", err)
		}
	}
}

// baseKey is the part of every key that the daemon fixes.
func (m *Manager) baseKey(ctx context.Context) (Key, error) {
	version, err := m.opts.Driver.Version(ctx)
	if err != nil {
		return Key{}, fmt.Errorf("templates: %w", err)
	}
	k, i, err := m.digests.Get(m.opts.Kernel, m.opts.Initramfs)
	if err != nil {
		return Key{}, fmt.Errorf("templates: %w", err)
	}
	accel := m.opts.Accel
	if accel == "" {
		accel = "tcg"
	}
	return Key{Format: format, VMM: m.opts.Driver.Name() + " " + version, Kernel: k, Initramfs: i, Cmdline: m.opts.Cmdline, Accel: accel, Slots: m.opts.Slots}, nil
}

func (m *Manager) keyFor(ctx context.Context, memoryMiB, cpus, nics int) (Key, error) {
	k, err := m.baseKey(ctx)
	if err != nil {
		return Key{}, err
	}
	k.MemoryMiB, k.CPUs, k.NICs = memoryMiB, max(cpus, 1), nics
	return k, nil
}

// bootsAsDaemon says whether cfg boots the daemon's kernel, initramfs,
// command line and accelerator, as every template of key k does.
func (m *Manager) bootsAsDaemon(cfg vmm.Config, k Key) bool {
	return cfg.Cmdline == m.opts.Cmdline && (cfg.Accel == "" || cfg.Accel == k.Accel) && cfg.Kernel == m.opts.Kernel && cfg.Initramfs == m.opts.Initramfs
}

// Close stops builds under way and waits for them.
func (m *Manager) Close() {
	m.cancel()
	m.builds.Wait()
}

// Prepare builds the template for this shape in the background, unless
// it exists, is being built, or failed before.
func (m *Manager) Prepare(ctx context.Context, memoryMiB, cpus, nics int) {
	k, err := m.keyFor(ctx, memoryMiB, cpus, nics)
	if err != nil {
		m.log.Warn("template", "err", err)
		return
	}
	m.buildShapeLater(k)
}

func (m *Manager) buildShapeLater(k Key) {
	m.buildLater(k.digest(), func(ctx context.Context) (meta, error) { return m.build(ctx, k) })
}

// buildLater starts a background build of the template named d unless
// one exists or runs. Builds run one at a time: each runs a VM, and the
// host's cores are better spent on the containers that are asking for
// them.
func (m *Manager) buildLater(d string, build func(context.Context) (meta, error)) {
	m.mu.Lock()
	_, ready := m.ready[d]
	_, pending := m.pending[d]
	_, failed := m.failed[d]
	if ready || pending || failed || m.ctx.Err() != nil {
		m.mu.Unlock()
		return
	}
	m.pending[d] = struct{}{}
	m.builds.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.builds.Done()
		m.buildOne(d, build)
	}()
}

func (m *Manager) buildOne(d string, build func(context.Context) (meta, error)) {
	var md meta
	err := m.ctx.Err()
	select {
	case m.buildSlot <- struct{}{}:
		start := time.Now()
		md, err = build(m.ctx)
		<-m.buildSlot
		if err == nil {
			msg := "template ready"
			if md.Image != nil {
				msg = "image template ready"
			}
			m.log.Info(msg, append(describe(md), "took", time.Since(start).Round(time.Millisecond))...)
		}
	case <-m.ctx.Done():
		err = m.ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pending, d)
	if err != nil {
		m.failed[d] = err
		switch {
		case m.ctx.Err() != nil:
		case errdefs.IsNotImplemented(err):
			// A VMM that cannot make this kind of template (image
			// templates under cloud-hypervisor) is not a failure.
			m.log.Debug("template not made", "template", d, "reason", err)
		default:
			m.log.Warn("template build failed; its containers start without it", "template", d, "err", err)
		}
		return
	}
	m.ready[d] = md
}

// describe is what logs say of a template.
func describe(md meta) []any {
	k := md.Key
	out := []any{"memory_mib", k.MemoryMiB, "cpus", k.CPUs, "nics", k.NICs}
	if md.Image != nil {
		out = append(out, "image_base", md.Image.Base.Path)
	}
	return out
}

// Wait blocks until no build is under way or ctx ends.
func (m *Manager) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		m.builds.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// build boots a guest of shape k to agent-ready and snapshots it into
// Dir/<digest>, through a build directory renamed into place at the end.
func (m *Manager) build(ctx context.Context, k Key) (_ meta, err error) {
	tmp, err := os.MkdirTemp(m.opts.Dir, buildPrefix)
	if err != nil {
		return meta{}, fmt.Errorf("create template build dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	runDir, snapDir := filepath.Join(tmp, "run"), filepath.Join(tmp, snapshotDir)
	for _, d := range []string{runDir, snapDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return meta{}, fmt.Errorf("create %s: %w", d, err)
		}
	}
	suffix, err := randomHex(3)
	if err != nil {
		return meta{}, err
	}
	md := meta{Key: k, Created: time.Now().UTC()}
	for range k.NICs {
		mac, err := templateMAC()
		if err != nil {
			return meta{}, err
		}
		md.MACs = append(md.MACs, mac)
	}
	nets, cleanup, err := m.buildTaps(tmp, md.MACs)
	defer cleanup()
	if err != nil {
		return meta{}, err
	}
	vc := vmm.Config{
		ID: "template-" + k.digest()[:8], Dir: runDir, Kernel: m.opts.Kernel, Initramfs: m.opts.Initramfs,
		Cmdline: m.opts.Cmdline, MemoryMiB: k.MemoryMiB, CPUs: k.CPUs, Accel: k.Accel, Nets: nets, Disks: k.Slots,
		// Restores then map the template's RAM copy-on-write instead of
		// reading it all from the snapshot (vmm.Config.FileMemory).
		FileMemory: true,
	}
	machine, err := m.opts.Driver.Start(ctx, vc)
	if errdefs.IsNotImplemented(err) {
		// cloud-hypervisor keeps RAM in its snapshot; its restores fault
		// it in lazily themselves when the driver restores OnDemand.
		m.log.Debug("template RAM in its snapshot", "vmm", m.opts.Driver.Name(), "reason", err)
		vc.FileMemory = false
		machine, err = m.opts.Driver.Start(ctx, vc)
	}
	if err != nil {
		return meta{}, fmt.Errorf("boot template: %w", err)
	}
	defer discard(machine)
	// A boot that locks up has its code translated afresh where the VMM
	// can; one that spins on fails the build then, not at its timeout,
	// and the container that asked boots cold meanwhile.
	console := filepath.Join(runDir, "console.log")
	client, err := vmm.AwaitBoot(ctx, m.log, vmm.Boot{
		ID: vc.ID, Machine: machine, Console: console, Deadline: time.Now().Add(m.opts.ReadyTimeout),
		Retranslate: k.Accel != "kvm", Symbol: m.opts.KernelSymbol,
	}, func(ctx context.Context) (*host.Client, error) { return connect(ctx, machine) })
	if err != nil {
		return meta{}, fmt.Errorf("boot template: %w (console log: %s)", err, console)
	}
	if err := m.warm(ctx, machine, client, tmp, suffix); err != nil {
		_ = client.Close()
		return meta{}, err
	}
	_ = client.Close()
	if err := m.snapshot(ctx, machine, snapDir); err != nil {
		return meta{}, fmt.Errorf("boot template: %w", err)
	}
	discard(machine)
	cleanup()
	if err := os.RemoveAll(runDir); err != nil {
		return meta{}, fmt.Errorf("remove template run dir: %w", err)
	}
	if err := m.publish(tmp, k.digest(), md); err != nil {
		return meta{}, err
	}
	return md, nil
}

// buildTaps makes the throwaway TAPs a template build's NICs need, one
// per MAC, naming each in the build directory dir first; cleanup removes
// those made, also after an error, and once all are gone their names. A
// build calls it before it publishes the template, so that a daemon that
// dies then leaves no TAP the next one does not know of; a second call
// does nothing.
func (m *Manager) buildTaps(dir string, macs []string) (_ []vmm.Net, cleanup func(), err error) {
	var made []string
	cleanup = func() {
		left := false
		for _, tap := range made {
			if derr := m.opts.Taps.Delete(tap); derr != nil {
				m.log.Warn("remove template tap", "tap", tap, "err", derr)
				left = true
			}
		}
		made = nil
		if !left {
			_ = os.Remove(filepath.Join(dir, tapsFile))
		}
	}
	suffix, err := randomHex(3)
	if err != nil {
		return nil, cleanup, err
	}
	var nets []vmm.Net
	for i, mac := range macs {
		// Interface names are at most 15 bytes.
		tap := fmt.Sprintf("hsktpl%s%d", suffix, i)
		if err := vmmproc.AppendLine(filepath.Join(dir, tapsFile), tap); err != nil {
			return nil, cleanup, err
		}
		if err := m.opts.Taps.Add(tap); err != nil {
			return nil, cleanup, err
		}
		made = append(made, tap)
		nets = append(nets, vmm.Net{Tap: tap, MAC: mac})
	}
	return nets, cleanup, nil
}

// snapshot parks the agent of a template guest whose sessions are
// closed, pauses the VM and snapshots it into dir. Every restore opens a
// session of its own, so the template is snapshotted with none: its
// agent parked at the start of a session. A yamux session restored with
// it would first have to fail on the next host's hello ("invalid protocol
// version") and unwind, in every VM started from the template.
func (m *Manager) snapshot(ctx context.Context, machine vmm.Machine, dir string) error {
	parkCtx, cancel := context.WithTimeout(ctx, m.opts.ReadyTimeout)
	parked, err := park(parkCtx, machine)
	cancel()
	if err != nil {
		return err
	}
	defer parked.Close()
	if err := machine.Pause(ctx); err != nil {
		return fmt.Errorf("pause template: %w", err)
	}
	if err := machine.Snapshot(ctx, dir); err != nil {
		return fmt.Errorf("snapshot template: %w", err)
	}
	return nil
}

// publish writes md into the build directory tmp and renames it to
// Dir/name, replacing any template there.
func (m *Manager) publish(tmp, name string, md meta) error {
	b, err := json.MarshalIndent(md, "", "  ")
	if err != nil {
		return fmt.Errorf("encode template: %w", err)
	}
	if err := renameio.WriteFile(filepath.Join(tmp, metaFile), b, 0o600); err != nil {
		return fmt.Errorf("write template record: %w", err)
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	final := filepath.Join(m.opts.Dir, name)
	if err := os.RemoveAll(final); err != nil {
		return fmt.Errorf("replace template %s: %w", final, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("put template in place: %w", err)
	}
	return syncDir(m.opts.Dir)
}

// VM is a running VM restored from a template, its disks attached and
// an agent session open; the guest has not been set up.
type VM struct {
	Machine vmm.Machine
	Client  *host.Client
	// DeviceMACs are the MACs of the VM's NICs, in cfg.Nets order: the
	// template's, until OpSetup gives them the container's.
	DeviceMACs []string
	// Template names the template it was restored from (Manager.Template).
	Template string
	// Slots are its empty removable disks (Options.Slots).
	Slots []vmm.Disk
}

// Start restores a VM shaped as cfg from its template, attaches cfg.Disks,
// opens an agent session and refreshes the guest's clock and RNG. cfg's
// MACs are not applied: the caller's OpSetup does that (DeviceMACs).
// When no template fits yet it fails with errdefs.ErrNotFound, saying
// why, and builds one in the background; callers boot cold then. On
// error nothing is left running.
func (m *Manager) Start(ctx context.Context, cfg vmm.Config) (_ *VM, err error) {
	k, err := m.keyFor(ctx, cfg.MemoryMiB, cfg.CPUs, len(cfg.Nets))
	if err != nil {
		return nil, err
	}
	if !m.bootsAsDaemon(cfg, k) {
		return nil, errdefs.ErrNotFound.WithMessage("no template: the VM's kernel, initramfs, command line or accelerator differ from the daemon's")
	}
	d := k.digest()
	m.mu.Lock()
	md, ok := m.ready[d]
	_, pending := m.pending[d]
	failed := m.failed[d]
	m.mu.Unlock()
	switch {
	case failed != nil:
		return nil, errdefs.ErrNotFound.WithMessage("no template: its build failed: " + failed.Error())
	case pending:
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("no template yet for %d MiB, %d CPUs, %d NICs: being built", k.MemoryMiB, k.CPUs, k.NICs))
	case !ok:
		m.buildShapeLater(k)
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("no template yet for %d MiB, %d CPUs, %d NICs: building one", k.MemoryMiB, k.CPUs, k.NICs))
	}
	disks := cfg.Disks
	cfg.Disks = k.Slots
	t0 := time.Now()
	machine, err := m.opts.Driver.Restore(ctx, cfg, filepath.Join(m.opts.Dir, d, snapshotDir))
	if err != nil {
		return nil, fmt.Errorf("restore template: %w", err)
	}
	defer func() {
		if err != nil {
			discard(machine)
		}
	}()
	restored := time.Now()
	var att DiskAttacher
	if len(disks) > 0 {
		var ok bool
		if att, ok = machine.(DiskAttacher); !ok {
			return nil, fmt.Errorf("restore template: %s cannot hot-plug disks: %w", m.opts.Driver.Name(), errdefs.ErrNotImplemented)
		}
	}
	// The disks go in while the agent's session opens: the first is the
	// VMM's own work (its control socket and main thread), the second the
	// guest's (its vCPU), so on a host with a core for each neither waits
	// for the other. The guest looks for the disks only at setup, after
	// both.
	g, gctx := errgroup.WithContext(ctx)
	attached := restored
	if att != nil {
		g.Go(func() error {
			defer func() { attached = time.Now() }()
			if err := att.AttachDisks(gctx, disks); err != nil {
				return fmt.Errorf("restore template: %w", err)
			}
			return nil
		})
	}
	var client *host.Client
	g.Go(func() error {
		c, err := m.openRestored(gctx, machine, cfg.Dir)
		if err != nil {
			return fmt.Errorf("restore template: %w", err)
		}
		client = c
		return nil
	})
	gerr := g.Wait()
	if client != nil {
		defer func() {
			if err != nil {
				_ = client.Close()
			}
		}()
	}
	if gerr != nil {
		return nil, gerr
	}
	m.log.Debug("restored from template", "vm", cfg.ID, "restore", restored.Sub(t0), "hotplug", attached.Sub(restored),
		"agent", time.Since(restored))
	return &VM{Machine: machine, Client: client, DeviceMACs: append([]string(nil), md.MACs...), Template: d, Slots: k.Slots}, nil
}

// warm runs Warm in a template guest about to be snapshotted, when the
// daemon gave disks for it and the driver can unplug them again.
func (m *Manager) warm(ctx context.Context, machine vmm.Machine, client *host.Client, dir, serial string) error {
	pl, ok := machine.(DiskPlugger)
	if m.opts.Disks == nil || !ok {
		return nil
	}
	st, err := Warm(ctx, Warmup{Machine: pl, Client: client, Dir: dir, Disks: m.opts.Disks, DiskSize: m.opts.WarmDiskSize, Serial: "tpl" + serial, Slots: m.opts.Slots})
	if err != nil {
		return fmt.Errorf("boot template: %w", err)
	}
	m.log.Debug("template warmed", "serial", serial, "disks", st.Disks, "hotplug", st.Hotplug, "warm", st.Warm, "unplug", st.Unplug)
	return nil
}

// DefaultRestoreTimeout is Options.RestoreTimeout's default, far above
// what a restored agent has been seen to take under load on two TCG
// cores: at most 0.27 s in the end-to-end suite with --debug, and ten
// concurrent starts end within ~7 s all told.
const DefaultRestoreTimeout = 30 * time.Second

// openRestored opens an agent session with a guest just restored, whose
// VM directory is dir, and refreshes the guest's clock and RNG: the
// refresh is the session's first request, which saves the round trip of
// a ping.
func (m *Manager) openRestored(ctx context.Context, machine vmm.Machine, dir string) (*host.Client, error) {
	readyCtx, cancel := context.WithTimeout(ctx, m.opts.RestoreTimeout)
	defer cancel()
	c, err := host.ConnectWith(readyCtx, machine, 20*time.Millisecond, Refresh)
	if err != nil {
		vmm.ReportStall(ctx, readyCtx, m.log, dir, machine, m.opts.KernelSymbol)
		return nil, fmt.Errorf("%w (console log: %s)", err, filepath.Join(dir, "console.log"))
	}
	return c, nil
}

// connect opens an agent session, retrying while the guest boots.
func connect(ctx context.Context, machine vmm.Machine) (*host.Client, error) {
	return host.Connect(ctx, machine, 20*time.Millisecond)
}

// park leaves the VM's agent waiting at the start of a session
// (host.Park) and returns the connection that parked it, to be closed only
// once the VM is paused.
func park(ctx context.Context, machine vmm.Machine) (net.Conn, error) {
	conn, err := machine.DialAgent(ctx)
	if err != nil {
		return nil, fmt.Errorf("park agent: %w", err)
	}
	if err := host.Park(ctx, conn); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// discard kills a VM and removes what its driver made; it is idempotent.
func discard(machine vmm.Machine) {
	_ = machine.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = machine.Wait(ctx)
	_ = machine.Cleanup()
}

// templateMAC is a random locally administered unicast address in QEMU's
// 52:54:00 range.
func templateMAC() (string, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("template MAC: %w", err)
	}
	return net.HardwareAddr{0x52, 0x54, 0x00, b[0], b[1], b[2]}.String(), nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random name: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
