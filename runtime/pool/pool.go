// Package pool keeps container VMs restored from templates ahead of time
// (huskd --pool-size N): per VM shape in use, N VMs restored from the
// shape's template, paused, each with its agent session open, so that
// `docker run` skips the restore and the session start. A taken VM is
// replaced in the background; a VM whose template was invalidated (a new
// QEMU, kernel or initramfs) is discarded when that is noticed (at the
// next take or refill of its shape) and replaced from the new template.
//
// A pooled VM is restored before its container exists, so what a
// template restore binds at once is bound when the VM is taken:
//
//   - its directory: the VM runs in Dir/<id>, which the take renames into
//     the container's VM directory (the QEMU process follows: its working
//     directory, sockets and open files keep their inodes), so a daemon
//     restart reattaches it there like any container VM;
//   - its network: each NIC is backed by a spare TAP on no bridge
//     (network.UnbridgedTaps, made exactly as containers' TAPs are), and
//     the take has the network manager adopt the spares as the container's
//     endpoints (network.Manager.AdoptTaps: renamed to the endpoints' TAP
//     names, put on their bridges, brought up). The alternative, pooled
//     VMs without NICs and the NICs hot-plugged at take, was not chosen:
//     a NIC hot-plug is an ACPI PCI hot-plug, which the guest took
//     0.2-0.5 s under TCG to probe on the i440fx pc (~0.15 s on Q35), much
//     of what the pool exists to save. Adoption is a few netlink calls;
//   - its disks, hot-plugged as after a template restore;
//   - its identity: the VM's NICs are recorded under the container's MACs
//     (for disconnect and snapshots), the guest's clock and RNG are
//     refreshed at take (templates.Refresh), and the caller's OpSetup then
//     gives the NICs the container's MACs and addresses (DeviceMACs name
//     the template's) and sets the hostname, as for a template restore.
//
// Pooled VMs are paused, not running idle: on a 2-core host a guest that
// idles still costs timer interrupts under TCG, and resuming is one QMP
// command. Yamux keep-alives are off (shim/host), so a session survives
// the pause.
//
// Nothing here outlives the daemon: Close kills every pooled VM and
// deletes its TAPs. A daemon that died leaves VMs (a VMM outlives its
// daemon) and TAPs; New finds them from what is in Dir — the VMs'
// directories and, per VM, a record of its TAPs written before each TAP
// is made — and removes them before the pool fills again.
package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/network"
	"github.com/husk-vm/husk/runtime/templates"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
)

const (
	// tapsSuffix names a VM's TAP record, Dir/<id>.taps, beside its
	// directory Dir/<id>.
	tapsSuffix = ".taps"
	// TapPrefix begins every spare TAP: "hskp", 10 hex digits of the VM's
	// id and the NIC's index in hex (15 bytes at most).
	TapPrefix = "hskp"
	// maxShapes bounds the shapes kept filled: each pooled VM holds its
	// guest's memory, and a shape used once should not cost it forever.
	// The least recently used shape is drained first.
	maxShapes = 4
	// discardTimeout bounds waiting for a killed VMM to exit.
	discardTimeout = 10 * time.Second
)

// Shape is what a pooled VM fits: containers of this memory, CPU count
// and number of networks.
type Shape struct {
	MemoryMiB int
	CPUs      int
	NICs      int
}

func (s Shape) String() string {
	return fmt.Sprintf("%d MiB, %d CPUs, %d NICs", s.MemoryMiB, s.CPUs, s.NICs)
}

// Templates restores VMs from templates (*templates.Manager).
type Templates interface {
	// Start restores a VM shaped as cfg from its template, with an agent
	// session open; errdefs.ErrNotFound when no template fits yet.
	Start(ctx context.Context, cfg vmm.Config) (*templates.VM, error)
	// Template names the template a VM of this shape restores from now.
	Template(ctx context.Context, memoryMiB, cpus, nics int) (string, error)
}

// Taps makes and removes spare TAPs; network.UnbridgedTaps is the real one.
type Taps interface {
	Add(name string) error
	Delete(name string) error
}

// Network adopts a VM's spare TAPs as a container's endpoints
// (*network.Manager).
type Network interface {
	AdoptTaps(ctx context.Context, taps, spares []string) error
}

// handover is what a pooled VM's machine must do when taken, and to be
// warmed before (qemu.Machine does).
type handover interface {
	Relocate(dir string) error
	RecordNICMACs(macs []string) error
	templates.DiskPlugger
}

// Disks makes the blank disks a warm-up mounts (*rootfs.Store).
type Disks = templates.Disks

// Options configure a Pool.
type Options struct {
	// Dir holds the pooled VMs; created if missing. It must be on the
	// file system of the containers' VM directories (a take renames).
	Dir string
	// Size is the number of VMs kept per shape; at least 1.
	Size      int
	Templates Templates
	// Driver reattaches the VMs a dead daemon left in Dir, to kill them.
	Driver vmm.Driver
	// Kernel, Initramfs, Cmdline and Accel are the daemon's guest: a VM
	// asked for with others is not pooled.
	Kernel    string
	Initramfs string
	Cmdline   string
	Accel     string
	// Taps defaults to network.UnbridgedTaps.
	Taps Taps
	// Network adopts spare TAPs; without it only VMs without NICs are
	// handed out.
	Network Network
	// Disks, when set, has every pooled VM warmed before it is paused
	// (warm); WarmDiskSize is the apparent size of its disks (the
	// containers' upper size, whose template the store has).
	Disks        Disks
	WarmDiskSize int64
	// RefillDelay holds off the refill of a shape after a take; default
	// 500 ms. The taken VM's guest then sets up and starts the container,
	// which under TCG needs a host core: on the 2-core development host a
	// refill (restore and warm-up) started at the take made that 70-150 ms
	// slower. 500 ms covers the take-to-started time measured there.
	RefillDelay time.Duration
	// Retry is the wait after a failed restore, doubled on each further
	// failure up to 16 times; default 1 s.
	Retry  time.Duration
	Logger *slog.Logger
}

// Pool keeps VMs restored ahead of time.
type Pool struct {
	opts Options
	log  *slog.Logger
	// ctx ends the filler and the restores under way.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}

	mu     sync.Mutex
	shapes map[Shape]*shapeState
	closed bool
	// used orders shapes by their last use.
	used uint64
}

type shapeState struct {
	ready    []*entry
	lastUsed uint64
	failures int
	// notBefore holds off refills after failures.
	notBefore time.Time
	// disabled is why this shape is never pooled (a VMM that cannot
	// hand its VMs over).
	disabled error
}

// entry is one pooled VM.
type entry struct {
	id     string
	dir    string // where its VMM runs
	moved  bool   // dir is a container's now
	shape  Shape
	spares []string
	vm     *templates.VM
}

// New opens the pool in opts.Dir, removing the VMs and TAPs a previous
// daemon left there, and starts filling in the background.
func New(ctx context.Context, opts Options) (*Pool, error) {
	if opts.Dir == "" || opts.Templates == nil || opts.Driver == nil || opts.Size < 1 {
		return nil, fmt.Errorf("pool: dir, templates, driver and a size of at least 1 are required: %w", errdefs.ErrInvalidArgument)
	}
	if opts.Taps == nil {
		opts.Taps = network.UnbridgedTaps{}
	}
	if opts.Retry <= 0 {
		opts.Retry = time.Second
	}
	if opts.RefillDelay <= 0 {
		opts.RefillDelay = 500 * time.Millisecond
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pool dir: %w", err)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Pool{opts: opts, log: log, ctx: pctx, cancel: cancel, kick: make(chan struct{}, 1), shapes: map[Shape]*shapeState{}}
	if err := p.sweep(ctx); err != nil {
		cancel()
		return nil, err
	}
	p.wg.Add(1)
	go p.fill()
	return p, nil
}

// sweep removes what a previous daemon's pool left: VMs still running in
// their directories, TAPs named in records, the records.
func (p *Pool) sweep(ctx context.Context) error {
	entries, err := os.ReadDir(p.opts.Dir)
	if err != nil {
		return fmt.Errorf("list pool dir: %w", err)
	}
	var errs []error
	for _, e := range entries {
		path := filepath.Join(p.opts.Dir, e.Name())
		if e.IsDir() {
			if machine, err := p.opts.Driver.Reattach(ctx, path); err == nil {
				p.log.Info("killing a pooled VM a previous daemon left", "dir", path)
				kill(machine)
			}
		} else if strings.HasSuffix(e.Name(), tapsSuffix) {
			b, err := os.ReadFile(path)
			if err != nil {
				errs = append(errs, fmt.Errorf("read %s: %w", path, err))
				continue
			}
			for _, tap := range strings.Fields(string(b)) {
				if err := p.opts.Taps.Delete(tap); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", path, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sweep the pool a previous daemon left: %w", err)
	}
	return nil
}

// Prepare keeps VMs of shape s ready from now on.
func (p *Pool) Prepare(s Shape) {
	p.mu.Lock()
	p.useLocked(s)
	p.mu.Unlock()
	p.wake()
}

// useLocked marks s used now, making room for it if need be.
func (p *Pool) useLocked(s Shape) *shapeState {
	if p.closed {
		return &shapeState{}
	}
	p.used++
	st, ok := p.shapes[s]
	if !ok {
		if len(p.shapes) >= maxShapes {
			var oldest Shape
			var min uint64
			for k, v := range p.shapes {
				if min == 0 || v.lastUsed < min {
					oldest, min = k, v.lastUsed
				}
			}
			p.log.Debug("pool: draining the least recently used shape", "shape", oldest.String())
			p.discardLater(p.shapes[oldest].ready...)
			delete(p.shapes, oldest)
		}
		st = &shapeState{}
		p.shapes[s] = st
	}
	st.lastUsed = p.used
	return st
}

func (p *Pool) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Ready is the number of VMs of shape s ready to be taken.
func (p *Pool) Ready(s Shape) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.shapes[s]; ok {
		return len(st.ready)
	}
	return 0
}

// Close stops filling, then kills every pooled VM and removes its TAPs
// and files. VMs already taken are their containers'.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	var all []*entry
	for _, st := range p.shapes {
		all = append(all, st.ready...)
		st.ready = nil
	}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	for _, e := range all {
		p.discard(e)
	}
	p.log.Debug("pool drained", "vms", len(all))
}

// fill keeps every shape in use at Size ready VMs, one restore at a time:
// restores compete with running containers for the host's cores.
func (p *Pool) fill() {
	defer p.wg.Done()
	for p.ctx.Err() == nil {
		s, wait, ok := p.next()
		if ok {
			p.fillOne(s)
			continue
		}
		var timer <-chan time.Time
		var t *time.Timer
		if wait > 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-p.ctx.Done():
		case <-p.kick:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// next picks a shape short of VMs that is not holding off; otherwise it
// says how long until the first one that holds off may try again.
func (p *Pool) next() (Shape, time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Shape{}, 0, false
	}
	now := time.Now()
	var wait time.Duration
	for s, st := range p.shapes {
		if st.disabled != nil || len(st.ready) >= p.opts.Size {
			continue
		}
		if d := st.notBefore.Sub(now); d > 0 {
			if wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		return s, 0, true
	}
	return Shape{}, wait, false
}

// fillOne restores one VM of shape s, first discarding those of an
// invalidated template.
func (p *Pool) fillOne(s Shape) {
	ctx := p.ctx
	current, err := p.opts.Templates.Template(ctx, s.MemoryMiB, s.CPUs, s.NICs)
	if err != nil {
		p.failed(s, fmt.Errorf("pool: template of %s: %w", s, err))
		return
	}
	p.mu.Lock()
	st, ok := p.shapes[s]
	if !ok || p.closed {
		p.mu.Unlock()
		return
	}
	p.discardLater(st.purgeLocked(current)...)
	full := len(st.ready) >= p.opts.Size
	p.mu.Unlock()
	if full {
		return
	}
	start := time.Now()
	e, err := p.restore(ctx, s)
	if err != nil {
		p.failed(s, err)
		return
	}
	p.mu.Lock()
	st, ok = p.shapes[s]
	if !ok || p.closed || e.vm.Template != current {
		p.mu.Unlock()
		p.discard(e)
		return
	}
	st.ready = append(st.ready, e)
	st.failures, st.notBefore = 0, time.Time{}
	n := len(st.ready)
	p.mu.Unlock()
	p.log.Info("pool VM ready", "shape", s.String(), "ready", n, "took", time.Since(start).Round(time.Millisecond))
}

// purgeLocked removes and returns the VMs not of template current.
func (st *shapeState) purgeLocked(current string) []*entry {
	var stale []*entry
	keep := st.ready[:0]
	for _, e := range st.ready {
		if e.vm.Template == current {
			keep = append(keep, e)
		} else {
			stale = append(stale, e)
		}
	}
	clear(st.ready[len(keep):])
	st.ready = keep
	return stale
}

// failed holds off refills of s for a while, longer after each failure;
// a VMM that cannot hand VMs over stops them for good.
func (p *Pool) failed(s Shape, err error) {
	if p.ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.shapes[s]
	if !ok {
		return
	}
	if errdefs.IsNotImplemented(err) {
		st.disabled = err
		p.log.Warn("pool: not pooling VMs of this shape", "shape", s.String(), "err", err)
		return
	}
	st.notBefore = time.Now().Add(p.opts.Retry << min(st.failures, 4))
	st.failures++
	if errdefs.IsNotFound(err) {
		p.log.Debug("pool: waiting for a template", "shape", s.String(), "reason", err)
	} else {
		p.log.Warn("pool: restoring a VM failed", "shape", s.String(), "err", err)
	}
}

// restore makes one pooled VM: spare TAPs (recorded before each is made),
// a restore from the template into Dir/<id>, paused. On error nothing is
// left.
func (p *Pool) restore(ctx context.Context, s Shape) (_ *entry, err error) {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("pool VM id: %w", err)
	}
	id := hex.EncodeToString(b)
	e := &entry{id: id, dir: filepath.Join(p.opts.Dir, id), shape: s}
	defer func() {
		if err != nil {
			p.discard(e)
		}
	}()
	if err := os.Mkdir(e.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pool VM dir: %w", err)
	}
	var nets []vmm.Net
	for i := range s.NICs {
		tap := fmt.Sprintf("%s%s%x", TapPrefix, id, i)
		if err := vmmproc.AppendLine(p.recordPath(e), tap); err != nil {
			return nil, err
		}
		if err := p.opts.Taps.Add(tap); err != nil {
			return nil, err
		}
		e.spares = append(e.spares, tap)
		// The restored device keeps the template's MAC whatever is asked
		// here; the take records the container's.
		nets = append(nets, vmm.Net{Tap: tap, MAC: net.HardwareAddr{0x52, 0x54, 0x00, b[0], b[1], byte(i)}.String()})
	}
	vm, err := p.opts.Templates.Start(ctx, vmm.Config{
		ID: "pool-" + id, Dir: e.dir, Kernel: p.opts.Kernel, Initramfs: p.opts.Initramfs, Cmdline: p.opts.Cmdline,
		Accel: p.opts.Accel, MemoryMiB: s.MemoryMiB, CPUs: s.CPUs, Nets: nets,
	})
	if err != nil {
		return nil, err
	}
	e.vm = vm
	if _, ok := vm.Machine.(handover); !ok {
		return nil, fmt.Errorf("pool: the VMM's machines cannot be handed over: %w", errdefs.ErrNotImplemented)
	}
	if p.opts.Disks != nil {
		if err := p.warm(ctx, e); err != nil {
			return nil, err
		}
	}
	if err := vm.Machine.Pause(ctx); err != nil {
		return nil, fmt.Errorf("pause pooled VM: %w", err)
	}
	return e, nil
}

func (p *Pool) recordPath(e *entry) string { return filepath.Join(p.opts.Dir, e.id+tapsSuffix) }

// discardLater discards VMs in the background; Close waits for it.
func (p *Pool) discardLater(es ...*entry) {
	if len(es) == 0 {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for _, e := range es {
			p.discard(e)
		}
	}()
}

// discard kills a pooled VM and removes its TAPs and files; what was
// adopted or moved is left to its container.
func (p *Pool) discard(e *entry) {
	if e.vm != nil {
		_ = e.vm.Client.Close()
		kill(e.vm.Machine)
	}
	for _, tap := range e.spares {
		if err := p.opts.Taps.Delete(tap); err != nil {
			p.log.Warn("pool: remove spare tap", "tap", tap, "err", err)
		}
	}
	if err := os.Remove(p.recordPath(e)); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.log.Warn("pool: remove tap record", "err", err)
	}
	if !e.moved {
		if err := os.RemoveAll(e.dir); err != nil {
			p.log.Warn("pool: remove VM dir", "dir", e.dir, "err", err)
		}
	}
}

// kill ends a VMM and removes what its driver made.
func kill(machine vmm.Machine) {
	_ = machine.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	defer cancel()
	_ = machine.Wait(ctx)
	_ = machine.Cleanup()
}
