package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/templates"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
	"github.com/husk-vm/husk/runtime/vmm/vmmtest"
	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// fakeTemplates restores fake machines whose agents run in-process.
type fakeTemplates struct {
	t *testing.T

	mu       sync.Mutex
	current  string       // the template's name; "" has none ready
	fail     error        // Start fails with it
	failed   []vmm.Config // the Starts that failed with fail
	restores []vmm.Config
	machines []*fakeMachine
	refresh  fakeRefresher
}

func (f *fakeTemplates) setCurrent(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current = name
}

func (f *fakeTemplates) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeTemplates) Template(_ context.Context, memoryMiB, cpus, nics int) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("%s/%d/%d/%d", f.current, memoryMiB, cpus, nics), nil
}

func (f *fakeTemplates) Start(ctx context.Context, cfg vmm.Config) (*templates.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		f.failed = append(f.failed, cfg)
		return nil, f.fail
	}
	if f.current == "" {
		return nil, errdefs.ErrNotFound.WithMessage("no template yet")
	}
	if _, err := os.Stat(cfg.Dir); err != nil {
		f.t.Errorf("restore into %s: %v", cfg.Dir, err)
	}
	rootDir, err := f.agentDir()
	if err != nil {
		return nil, err
	}
	stateDir, err := f.agentDir()
	if err != nil {
		return nil, err
	}
	a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(rootDir), StateDir: stateDir, Refresher: &f.refresh})
	if err != nil {
		return nil, err
	}
	hostEnd, agentEnd := net.Pipe()
	go func() {
		_ = a.ServeConn(context.Background(), agentEnd)
		a.Close()
	}()
	client, err := host.New(hostEnd)
	if err != nil {
		return nil, err
	}
	// The VMM writes into its directory, as QEMU its logs and sockets.
	if err := os.WriteFile(filepath.Join(cfg.Dir, "qemu.log"), nil, 0o600); err != nil {
		return nil, err
	}
	m := newFakeMachine(cfg.Dir)
	f.restores = append(f.restores, cfg)
	f.machines = append(f.machines, m)
	var macs []string
	for range cfg.Nets {
		macs = append(macs, "52:54:00:aa:bb:cc")
	}
	return &templates.VM{Machine: m, Client: client, DeviceMACs: macs,
		Template: fmt.Sprintf("%s/%d/%d/%d", f.current, cfg.MemoryMiB, cfg.CPUs, len(cfg.Nets))}, nil
}

// agentDir is a directory for an in-process agent. Not t.TempDir: a warm-up
// under way when the pool closes goes on writing in its agent's root (the
// fake VM's kill does not stop the agent), so removal is retried until
// that is over: until a removal has held for 100 ms (a removal that
// succeeded while the warm-up was between writes let it recreate the
// directory).
func (f *fakeTemplates) agentDir() (string, error) {
	dir, err := os.MkdirTemp("", "pool-agent-")
	if err != nil {
		return "", err
	}
	f.t.Cleanup(func() {
		for range 100 {
			if err := os.RemoveAll(dir); err == nil {
				time.Sleep(100 * time.Millisecond)
				if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
					return
				}
				continue
			}
			time.Sleep(10 * time.Millisecond)
		}
		f.t.Errorf("remove %s: still written to", dir)
	})
	return dir, nil
}

func (f *fakeTemplates) failedStarts() []vmm.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.failed)
}

func (f *fakeTemplates) all() []*fakeMachine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.machines)
}

type fakeMachine struct {
	mu      sync.Mutex
	dir     string
	paused  bool
	killed  bool
	disks   []vmm.Disk
	plugged []vmm.Disk // every disk ever attached
	macs    []string
	failMAC bool
	*vmmtest.Process
}

func newFakeMachine(dir string) *fakeMachine {
	m := &fakeMachine{dir: dir}
	m.Process = vmmtest.NewProcess(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.killed = true
	})
	return m
}

func (m *fakeMachine) PID() int { return 1 }
func (m *fakeMachine) DialAgent(context.Context) (net.Conn, error) {
	return nil, errors.New("not here")
}
func (m *fakeMachine) Pause(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.paused = true
	return nil
}
func (m *fakeMachine) Resume(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.paused = false
	return nil
}
func (m *fakeMachine) Snapshot(context.Context, string) error { return errdefs.ErrNotImplemented }
func (m *fakeMachine) Shutdown(context.Context) error         { return m.Kill() }
func (m *fakeMachine) Relocate(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dir = dir
	return nil
}
func (m *fakeMachine) RecordNICMACs(macs []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failMAC {
		return errors.New("injected failure")
	}
	m.macs = macs
	return nil
}
func (m *fakeMachine) AttachDisks(_ context.Context, disks []vmm.Disk) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.disks = append(m.disks, disks...)
	m.plugged = append(m.plugged, disks...)
	return nil
}
func (m *fakeMachine) DetachDisks(_ context.Context, n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n > len(m.disks) {
		return errors.New("detach of disks not attached")
	}
	m.disks = m.disks[:len(m.disks)-n]
	return nil
}

func (m *fakeMachine) state() (dir string, paused, killed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dir, m.paused, m.killed
}

type fakeRefresher struct {
	mu     sync.Mutex
	clocks int
}

func (f *fakeRefresher) SetClock(time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clocks++
	return nil
}
func (f *fakeRefresher) Reseed([]byte) error                                 { return nil }
func (f *fakeRefresher) Readdress(context.Context, *proto.NetworkSpec) error { return nil }
func (f *fakeRefresher) SetHostname(int, string) error                       { return nil }

type fakeTaps struct {
	mu   sync.Mutex
	live map[string]bool
	fail bool
}

func (f *fakeTaps) Add(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errors.New("injected failure")
	}
	f.live[name] = true
	return nil
}
func (f *fakeTaps) Delete(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, name)
	return nil
}
func (f *fakeTaps) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.live {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// fakeNetwork adopts spares by renaming them in taps.
type fakeNetwork struct {
	taps *fakeTaps
	fail bool

	mu      sync.Mutex
	adopted [][2][]string
}

func (f *fakeNetwork) AdoptTaps(_ context.Context, taps, spares []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errors.New("injected failure")
	}
	f.adopted = append(f.adopted, [2][]string{taps, spares})
	f.taps.mu.Lock()
	defer f.taps.mu.Unlock()
	for i, s := range spares {
		delete(f.taps.live, s)
		f.taps.live[taps[i]] = true
	}
	return nil
}

// fakeDriver reattaches the machines of dirs it knows.
type fakeDriver struct {
	mu       sync.Mutex
	machines map[string]*fakeMachine
}

func (d *fakeDriver) Name() string                            { return "fake" }
func (d *fakeDriver) Version(context.Context) (string, error) { return "1", nil }
func (d *fakeDriver) Start(context.Context, vmm.Config) (vmm.Machine, error) {
	return nil, errdefs.ErrNotImplemented
}
func (d *fakeDriver) Restore(context.Context, vmm.Config, string) (vmm.Machine, error) {
	return nil, errdefs.ErrNotImplemented
}
func (d *fakeDriver) Reattach(_ context.Context, dir string) (vmm.Machine, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.machines[dir]; ok {
		return m, nil
	}
	return nil, errdefs.ErrNotFound
}

type world struct {
	// disks, when set, has the pool warm its VMs.
	disks Disks
	dir   string
	tpl   *fakeTemplates
	taps  *fakeTaps
	net   *fakeNetwork
	drv   *fakeDriver
	shape Shape
}

func newWorld(t *testing.T) *world {
	taps := &fakeTaps{live: map[string]bool{}}
	return &world{
		dir: t.TempDir(), tpl: &fakeTemplates{t: t, current: "A"}, taps: taps,
		net: &fakeNetwork{taps: taps}, drv: &fakeDriver{machines: map[string]*fakeMachine{}},
		shape: Shape{MemoryMiB: 256, CPUs: 1, NICs: 1},
	}
}

func (w *world) open(t *testing.T, size int) *Pool {
	t.Helper()
	p, err := New(context.Background(), Options{
		Dir: w.dir, Size: size, Templates: w.tpl, Driver: w.drv, Kernel: "k", Initramfs: "i", Accel: "tcg",
		Taps: w.taps, Network: w.net, Retry: time.Millisecond, RefillDelay: time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Disks: w.disks, WarmDiskSize: 64 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// containerCfg is a container's VM: its own dir, TAP (made by Attach) and
// disks.
func (w *world) containerCfg(t *testing.T, name string) vmm.Config {
	dir := filepath.Join(t.TempDir(), "vm")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console.log"), []byte("an earlier run"), 0o600); err != nil {
		t.Fatal(err)
	}
	tap := "hk" + name + "0"
	w.taps.Add(tap)
	return vmm.Config{ID: name, Dir: dir, Kernel: "k", Initramfs: "i", Accel: "tcg", MemoryMiB: 256, CPUs: 1,
		Disks: []vmm.Disk{{Path: "/base", ReadOnly: true, Serial: "husk-base"}, {Path: "/upper", Serial: "husk-upper"}},
		Nets:  []vmm.Net{{Tap: tap, MAC: "02:42:0a:7b:00:02"}}}
}

// waitFor polls cond; the bound only keeps a broken pool from hanging
// the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// dirEntries lists the pool's directory.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestFillTakeRefill: a prepared shape fills to Size paused VMs, each on
// its own spare TAPs; a take hands one over (moved into the container's
// directory, spares adopted as the container's TAPs, resumed, disks
// plugged, MACs recorded, guest refreshed) and the pool refills.
func TestFillTakeRefill(t *testing.T) {
	w := newWorld(t)
	p := w.open(t, 2)
	p.Prepare(w.shape)
	waitFor(t, "two VMs ready", func() bool { return p.Ready(w.shape) == 2 })
	for _, m := range w.tpl.all() {
		if _, paused, _ := m.state(); !paused {
			t.Error("a pooled VM is not paused")
		}
	}
	if got := len(w.taps.names()); got != 2 {
		t.Errorf("spare TAPs %v, want 2", w.taps.names())
	}

	cfg := w.containerCfg(t, "c1")
	vm, err := p.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := vm.Machine.(*fakeMachine)
	dir, paused, killed := m.state()
	switch {
	case dir != cfg.Dir:
		t.Errorf("machine relocated to %q, want %q", dir, cfg.Dir)
	case paused || killed:
		t.Errorf("taken VM paused %v killed %v", paused, killed)
	case len(m.disks) != 2 || !slices.Equal(m.macs, []string{"02:42:0a:7b:00:02"}):
		t.Errorf("taken VM has disks %v, MACs %v", m.disks, m.macs)
	case len(vm.DeviceMACs) != 1:
		t.Errorf("DeviceMACs %v", vm.DeviceMACs)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "qemu.log")); err != nil {
		t.Errorf("the VM's directory did not move into the container's: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "console.log")); !os.IsNotExist(err) {
		t.Errorf("the container's old VM directory was not replaced: %v", err)
	}
	w.net.mu.Lock()
	adopted := slices.Clone(w.net.adopted)
	w.net.mu.Unlock()
	if len(adopted) != 1 || !slices.Equal(adopted[0][0], []string{"hkc10"}) || len(adopted[0][1]) != 1 {
		t.Errorf("adoptions %v, want one of a spare as hkc10", adopted)
	}
	w.tpl.refresh.mu.Lock()
	clocks := w.tpl.refresh.clocks
	w.tpl.refresh.mu.Unlock()
	if clocks != 1 {
		t.Errorf("guest clock set %d times, want once at take", clocks)
	}
	waitFor(t, "the pool refilled", func() bool { return p.Ready(w.shape) == 2 })
	if n := len(w.tpl.all()); n != 3 {
		t.Errorf("%d restores, want 3", n)
	}
	_ = vm.Client.Close()

	// Another shape is not served by these, and starts being pooled.
	other := w.containerCfg(t, "c2")
	other.MemoryMiB = 512
	if _, err := p.Start(context.Background(), other); !errdefs.IsNotFound(err) {
		t.Errorf("take of an unpooled shape: %v, want not found", err)
	}
	waitFor(t, "the new shape is pooled", func() bool { return p.Ready(Shape{512, 1, 1}) == 2 })
}

// TestTemplateNotReadyYet: without a template the pool has nothing to
// give and leaves nothing behind; once the template exists it fills.
func TestTemplateNotReadyYet(t *testing.T) {
	w := newWorld(t)
	w.tpl.setCurrent("")
	p := w.open(t, 1)
	cfg := w.containerCfg(t, "c1")
	if _, err := p.Start(context.Background(), cfg); !errdefs.IsNotFound(err) {
		t.Fatalf("take without a template: %v, want not found", err)
	}
	if got := w.taps.names(); !slices.Equal(got, []string{"hkc10"}) {
		t.Errorf("TAPs %v, want only the container's", got)
	}
	w.tpl.setCurrent("A")
	p.Prepare(w.shape) // a take also marks the shape; this kicks the filler
	waitFor(t, "a VM ready", func() bool { return p.Ready(w.shape) == 1 })
}

// TestInvalidatedTemplate: VMs of a template that was replaced are
// discarded at the next take, which falls back, and the pool refills
// from the new template.
func TestInvalidatedTemplate(t *testing.T) {
	w := newWorld(t)
	p := w.open(t, 1)
	p.Prepare(w.shape)
	waitFor(t, "a VM ready", func() bool { return p.Ready(w.shape) == 1 })
	old := w.tpl.all()[0]
	w.tpl.setCurrent("B")
	if _, err := p.Start(context.Background(), w.containerCfg(t, "c1")); !errdefs.IsNotFound(err) {
		t.Fatalf("take with only a stale VM: %v, want not found", err)
	}
	waitFor(t, "the stale VM is killed", func() bool { _, _, killed := old.state(); return killed })
	waitFor(t, "a VM of the new template", func() bool { return p.Ready(w.shape) == 1 })
	vm, err := p.Start(context.Background(), w.containerCfg(t, "c2"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.Template != "B/256/1/1" {
		t.Errorf("taken VM of template %q, want B's", vm.Template)
	}
	_ = vm.Client.Close()
}

// TestErrorsLeaveNothing: failed restores leave no TAP, directory or
// record; a take that fails midway kills the VM and removes its spares,
// leaving the container's TAP; the pool goes on.
func TestErrorsLeaveNothing(t *testing.T) {
	w := newWorld(t)
	w.tpl.setFail(errors.New("qemu broke"))
	p := w.open(t, 1)
	p.Prepare(w.shape)
	waitFor(t, "a few failed restores", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.shapes[w.shape].failures >= 3
	})
	// The pool retries at once (Retry is 1 ms), so a restore after the
	// failed ones may be under way: what the failed ones made must be
	// gone, whatever the next one has made by now.
	taps, entries := w.taps.names(), dirEntries(t, w.dir)
	failed := w.tpl.failedStarts()
	if len(failed) < 3 {
		t.Fatalf("%d failed restores recorded, want 3 or more", len(failed))
	}
	for _, cfg := range failed {
		if filepath.Dir(cfg.Dir) != w.dir || len(cfg.Nets) == 0 {
			t.Fatalf("failed restore into %s with NICs %+v, want a directory of the pool's and a TAP", cfg.Dir, cfg.Nets)
		}
		for _, n := range cfg.Nets {
			if slices.Contains(taps, n.Tap) {
				t.Errorf("TAP %s of a failed restore left (TAPs %v)", n.Tap, taps)
			}
		}
		name := filepath.Base(cfg.Dir)
		if slices.Contains(entries, name) || slices.Contains(entries, name+".taps") {
			t.Errorf("files of the failed restore into %s left (pool dir %v)", cfg.Dir, entries)
		}
	}

	w.tpl.setFail(nil)
	waitFor(t, "a VM ready", func() bool { return p.Ready(w.shape) == 1 })
	w.net.mu.Lock()
	w.net.fail = true
	w.net.mu.Unlock()
	cfg := w.containerCfg(t, "c1")
	if _, err := p.Start(context.Background(), cfg); err == nil || errdefs.IsNotFound(err) {
		t.Fatalf("take with a failing adoption: %v, want a failure", err)
	}
	first := w.tpl.all()[0]
	if _, _, killed := first.state(); !killed {
		t.Error("the VM of a failed take still runs")
	}
	w.net.mu.Lock()
	w.net.fail = false
	w.net.mu.Unlock()
	waitFor(t, "the pool refilled", func() bool { return p.Ready(w.shape) == 1 })
	// The container's TAP and the new pooled VM's spare; nothing else.
	if got := w.taps.names(); len(got) != 2 || !slices.Contains(got, "hkc10") {
		t.Errorf("TAPs %v, want hkc10 and one spare", got)
	}
	if got := dirEntries(t, w.dir); len(got) != 2 {
		t.Errorf("pool dir %v, want one VM and its record", got)
	}
}

// TestCloseDrains: Close kills every pooled VM and removes its TAPs and
// files; a closed pool gives nothing.
func TestCloseDrains(t *testing.T) {
	w := newWorld(t)
	p := w.open(t, 2)
	p.Prepare(w.shape)
	p.Prepare(Shape{MemoryMiB: 128, CPUs: 1, NICs: 0})
	waitFor(t, "both shapes full", func() bool { return p.Ready(w.shape) == 2 && p.Ready(Shape{128, 1, 0}) == 2 })
	p.Close()
	for _, m := range w.tpl.all() {
		if _, _, killed := m.state(); !killed {
			t.Error("a pooled VM outlived Close")
		}
	}
	if got := w.taps.names(); len(got) != 0 {
		t.Errorf("TAPs after Close: %v", got)
	}
	if got := dirEntries(t, w.dir); len(got) != 0 {
		t.Errorf("pool dir after Close: %v", got)
	}
	if _, err := p.Start(context.Background(), w.containerCfg(t, "c1")); !errdefs.IsNotFound(err) {
		t.Errorf("take from a closed pool: %v, want not found", err)
	}
}

// TestSweepAfterCrash: what a daemon that died left in the pool's
// directory — a VM still running and its spare TAPs — is removed when
// the next pool opens.
func TestSweepAfterCrash(t *testing.T) {
	w := newWorld(t)
	left := filepath.Join(w.dir, "0123456789")
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	m := newFakeMachine(left)
	w.drv.machines[left] = m
	w.taps.Add(TapPrefix + "01234567890")
	if err := vmmproc.AppendLine(filepath.Join(w.dir, "0123456789"+tapsSuffix), TapPrefix+"01234567890"); err != nil {
		t.Fatal(err)
	}
	w.open(t, 1)
	if _, _, killed := m.state(); !killed {
		t.Error("the VM a dead daemon left still runs")
	}
	if got := w.taps.names(); len(got) != 0 {
		t.Errorf("TAPs after the sweep: %v", got)
	}
	if got := dirEntries(t, w.dir); len(got) != 0 {
		t.Errorf("pool dir after the sweep: %v", got)
	}
}

// TestShapeLimit: past maxShapes the least recently used shape is
// drained.
func TestShapeLimit(t *testing.T) {
	w := newWorld(t)
	p := w.open(t, 1)
	for i := range maxShapes + 1 {
		s := Shape{MemoryMiB: 128 + i, CPUs: 1, NICs: 0}
		p.Prepare(s)
		waitFor(t, fmt.Sprint(s, " ready"), func() bool { return p.Ready(s) == 1 })
	}
	first := w.tpl.all()[0]
	waitFor(t, "the first shape's VM is drained", func() bool { _, _, killed := first.state(); return killed })
	if p.Ready(Shape{MemoryMiB: 128, CPUs: 1, NICs: 0}) != 0 {
		t.Error("the least recently used shape is still pooled")
	}
}
