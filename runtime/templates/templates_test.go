package templates

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmtest"
	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/proto"
)

// fakeDriver's machines are in-process agents; it records what it was
// asked to do.
type fakeDriver struct {
	t       *testing.T
	version string
	hotplug bool
	// plug has template boots' machines plug and unplug disks (a warm-up).
	plug bool
	// noFileMemory refuses vmm.Config.FileMemory, as cloud-hypervisor does.
	noFileMemory bool
	// attachErr fails restored machines' AttachDisks.
	attachErr error
	// attachAwaitsAgent has AttachDisks wait until the machine's agent has
	// been dialed, failing after a while if it is not.
	attachAwaitsAgent bool
	// hungRestores gives restored machines an agent that never answers.
	hungRestores bool
	// lockedBoots gives booted machines an agent that never answers and
	// a console on which the guest's kernel reports a soft lockup.
	lockedBoots bool
	// retranslate gives locked boots' machines a Retranslate that frees
	// their agent, as QEMU's frees a guest caught in a stale translation.
	retranslate bool

	mu       sync.Mutex
	starts   []vmm.Config
	restores []vmm.Config
	from     []string
	attached [][]vmm.Disk
	// plugged and unplugged are what template boots' warm-ups did.
	plugged   []vmm.Disk
	unplugged int
	refresh   *fakeRefresher
	killed    int
	// retranslations counts Retranslate calls.
	retranslations int
}

func (d *fakeDriver) Name() string                            { return "fake" }
func (d *fakeDriver) Version(context.Context) (string, error) { return d.version, nil }
func (d *fakeDriver) Reattach(context.Context, string) (vmm.Machine, error) {
	return nil, errdefs.ErrNotFound
}

func (d *fakeDriver) Start(_ context.Context, cfg vmm.Config) (vmm.Machine, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.starts = append(d.starts, cfg)
	if cfg.FileMemory && d.noFileMemory {
		return nil, fmt.Errorf("file-backed memory: %w", errdefs.ErrNotImplemented)
	}
	if d.lockedBoots {
		if err := os.WriteFile(filepath.Join(cfg.Dir, "console.log"), []byte(lockupLine+"\n"), 0o600); err != nil {
			return nil, err
		}
		m := d.machine()
		m.hung.Store(true)
		if d.retranslate {
			return retranslatingMachine{m}, nil
		}
		return m, nil
	}
	if d.plug {
		return &pluggingMachine{d.machine()}, nil
	}
	return d.machine(), nil
}

// lockupLine is what a guest's watchdog printed in a boot that hung.
const lockupLine = "[   24.481263] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [swapper/0:0]"

func (d *fakeDriver) Restore(_ context.Context, cfg vmm.Config, dir string) (vmm.Machine, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "state")); err != nil {
		d.t.Errorf("restore from %s: no snapshot there: %v", dir, err)
	}
	if cfg.FileMemory && d.noFileMemory {
		return nil, fmt.Errorf("file-backed memory: %w", errdefs.ErrNotImplemented)
	}
	d.restores = append(d.restores, cfg)
	d.from = append(d.from, dir)
	m := d.machine()
	m.hung.Store(d.hungRestores)
	if d.hotplug {
		return &hotplugMachine{m}, nil
	}
	return m, nil
}

func (d *fakeDriver) machine() *fakeMachine {
	return &fakeMachine{d: d, dialed: make(chan struct{}), Process: vmmtest.NewProcess(func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.killed++
	})}
}

type fakeMachine struct {
	d *fakeDriver
	*vmmtest.Process
	// dialed is closed when the agent is first dialed.
	dialed     chan struct{}
	dialedOnce sync.Once
	// hung: the agent is never served, as in a guest that hangs.
	hung atomic.Bool
}

func (m *fakeMachine) PID() int { return 1 }
func (m *fakeMachine) DialAgent(ctx context.Context) (net.Conn, error) {
	m.dialedOnce.Do(func() { close(m.dialed) })
	if m.hung.Load() {
		hostEnd, _ := net.Pipe()
		return hostEnd, nil
	}
	a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(m.d.t.TempDir()), StateDir: m.d.t.TempDir(), Refresher: m.d.refresh})
	if err != nil {
		return nil, err
	}
	hostEnd, agentEnd := net.Pipe()
	go func() {
		_ = a.ServeConn(context.Background(), agentEnd)
		a.Close()
	}()
	return hostEnd, nil
}

// DescribeStall makes fake machines describe their guests, as QEMU's do.
func (m *fakeMachine) DescribeStall(context.Context) vmm.Stall {
	return vmm.Stall{State: "fake", Threads: []string{"1 fake S"}}
}
func (m *fakeMachine) Pause(context.Context) error  { return nil }
func (m *fakeMachine) Resume(context.Context) error { return nil }
func (m *fakeMachine) Snapshot(_ context.Context, dir string) error {
	return os.WriteFile(filepath.Join(dir, "state"), []byte("memory"), 0o600)
}
func (m *fakeMachine) Shutdown(context.Context) error { return m.Kill() }

// retranslatingMachine is a fakeMachine whose VMM can translate its
// guest's code afresh, which frees its agent.
type retranslatingMachine struct{ *fakeMachine }

func (m retranslatingMachine) Retranslate(context.Context) (int, error) {
	m.d.mu.Lock()
	m.d.retranslations++
	m.d.mu.Unlock()
	m.hung.Store(false)
	return 1, nil
}

type hotplugMachine struct{ *fakeMachine }

func (m *hotplugMachine) AttachDisks(_ context.Context, disks []vmm.Disk) error {
	if m.d.attachAwaitsAgent {
		select {
		case <-m.dialed:
		case <-time.After(5 * time.Second):
			return errors.New("the agent was not dialed while the disks went in")
		}
	}
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if m.d.attachErr != nil {
		return m.d.attachErr
	}
	m.d.attached = append(m.d.attached, disks)
	return nil
}

type pluggingMachine struct{ *fakeMachine }

func (m *pluggingMachine) AttachDisks(_ context.Context, disks []vmm.Disk) error {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	m.d.plugged = append(m.d.plugged, disks...)
	return nil
}

func (m *pluggingMachine) DetachDisks(_ context.Context, n int) error {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	m.d.unplugged += n
	return nil
}

type fakeRefresher struct {
	mu      sync.Mutex
	clocks  int
	entropy [][]byte
}

func (f *fakeRefresher) SetClock(time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clocks++
	return nil
}
func (f *fakeRefresher) Reseed(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entropy = append(f.entropy, append([]byte(nil), b...))
	return nil
}
func (f *fakeRefresher) Readdress(context.Context, *proto.NetworkSpec) error { return nil }
func (f *fakeRefresher) SetHostname(int, string) error                       { return nil }

type fakeTaps struct {
	mu         sync.Mutex
	live, ever []string
}

func (f *fakeTaps) Add(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live = append(f.live, name)
	f.ever = append(f.ever, name)
	return nil
}
func (f *fakeTaps) Delete(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live = slices.DeleteFunc(f.live, func(s string) bool { return s == name })
	return nil
}

func newManager(t *testing.T, dir string, d *fakeDriver, taps *fakeTaps) *Manager {
	t.Helper()
	return newManagerWith(t, Options{Dir: dir, Driver: d, Taps: taps})
}

// newManagerWith opens a Manager with opts, a kernel and initramfs of
// its own, the accelerator tcg and a 10 s ready timeout.
func newManagerWith(t *testing.T, opts Options) *Manager {
	t.Helper()
	boot := t.TempDir()
	opts.Kernel, opts.Initramfs = filepath.Join(boot, "vmlinuz"), filepath.Join(boot, "initramfs")
	for _, p := range []string{opts.Kernel, opts.Initramfs} {
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts.Accel, opts.ReadyTimeout = "tcg", 10*time.Second
	m, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func vmCfg(m *Manager, nets int) vmm.Config {
	cfg := vmm.Config{ID: "c1", Dir: "/nonexistent", Kernel: m.opts.Kernel, Initramfs: m.opts.Initramfs, Accel: "tcg", MemoryMiB: 256, CPUs: 1,
		Disks: []vmm.Disk{{Path: "/base", ReadOnly: true, Serial: "husk-base"}, {Path: "/upper", Serial: "husk-upper"}}}
	for range nets {
		cfg.Nets = append(cfg.Nets, vmm.Net{Tap: "hkc1", MAC: "02:42:0a:00:00:02"})
	}
	return cfg
}

// TestStartBuildsThenRestores: the first start of a shape finds no
// template and builds one (a diskless boot with throwaway TAPs, then a
// snapshot); the next restores it without disks, hot-plugs the disks and
// refreshes the guest's clock and RNG; a new Manager finds it on disk.
func TestStartBuildsThenRestores(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{t: t, version: "1", hotplug: true, refresh: &fakeRefresher{}}
	taps := &fakeTaps{}
	dir := t.TempDir()
	m := newManager(t, dir, d, taps)

	_, err := m.Start(ctx, vmCfg(m, 1))
	if !errdefs.IsNotFound(err) {
		t.Fatalf("first start: %v, want not found (no template yet)", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(d.starts) != 1 || len(d.starts[0].Disks) != 0 || len(d.starts[0].Nets) != 1 || d.starts[0].MemoryMiB != 256 {
		t.Fatalf("template boots = %+v, want one diskless 256 MiB boot with one NIC", d.starts)
	}
	if len(taps.ever) != 1 || len(taps.live) != 0 {
		t.Errorf("taps made %v, still there %v: want one made and removed", taps.ever, taps.live)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*", tapsFile)); len(left) != 0 {
		t.Errorf("the published template still names its build's TAPs: %v", left)
	}

	vm, err := m.Start(ctx, vmCfg(m, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Client.Close()
	if len(d.restores) != 1 || len(d.restores[0].Disks) != 0 || d.restores[0].Nets[0].Tap != "hkc1" {
		t.Fatalf("restores = %+v, want one without disks on the container's TAP", d.restores)
	}
	if len(d.attached) != 1 || len(d.attached[0]) != 2 || d.attached[0][0].Serial != "husk-base" {
		t.Errorf("hot-plugged %+v, want base and upper", d.attached)
	}
	if len(vm.DeviceMACs) != 1 || vm.DeviceMACs[0] != d.starts[0].Nets[0].MAC {
		t.Errorf("DeviceMACs %v, want the template's %s", vm.DeviceMACs, d.starts[0].Nets[0].MAC)
	}
	// The agent reseeds beside what follows the refresh, and before any
	// process starts: this start fails for want of a setup, after it.
	if _, err := vm.Client.Start(ctx, "p", proto.ProcessSpec{Args: []string{"true"}}); err == nil {
		t.Error("start without a setup succeeded")
	}
	if d.refresh.clocks != 1 || len(d.refresh.entropy) != 1 || len(d.refresh.entropy[0]) < 32 {
		t.Errorf("refresh: %d clock sets, entropy %d, want one of each with >= 32 bytes", d.refresh.clocks, len(d.refresh.entropy))
	}

	// Another shape is another template.
	if _, err := m.Start(ctx, vmCfg(m, 0)); !errdefs.IsNotFound(err) {
		t.Fatalf("start without NICs: %v, want not found", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// A Manager of the same daemon keeps both; one under another VMM
	// build drops them.
	m2 := newManagerSameBoot(t, dir, d, taps, m)
	if len(m2.ready) != 2 {
		t.Errorf("reopened cache holds %d templates, want 2", len(m2.ready))
	}
	other := &fakeDriver{t: t, version: "2", hotplug: true, refresh: &fakeRefresher{}}
	m3 := newManagerSameBoot(t, dir, other, taps, m)
	entries, _ := os.ReadDir(dir)
	if len(m3.ready) != 0 || len(entries) != 0 {
		t.Errorf("after a VMM upgrade: %d templates known, %d dirs left, want none", len(m3.ready), len(entries))
	}
}

func newManagerSameBoot(t *testing.T, dir string, d *fakeDriver, taps *fakeTaps, like *Manager) *Manager {
	t.Helper()
	m, err := New(context.Background(), Options{Dir: dir, Driver: d, Kernel: like.opts.Kernel, Initramfs: like.opts.Initramfs, Accel: "tcg", Taps: taps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestStartWithoutHotplug: a VMM whose machines cannot take disks after
// a restore fails the start (not "no template"), leaving nothing running.
func TestStartWithoutHotplug(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{t: t, version: "1", refresh: &fakeRefresher{}}
	m := newManager(t, t.TempDir(), d, &fakeTaps{})
	m.Prepare(ctx, 256, 1, 1)
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	killedBefore := d.killed
	_, err := m.Start(ctx, vmCfg(m, 1))
	if !errdefs.IsNotImplemented(err) {
		t.Fatalf("start: %v, want not implemented", err)
	}
	if d.killed != killedBefore+1 {
		t.Errorf("the restored VM was not killed")
	}
}

// TestStartAttachesWhileConnecting: a restored VM's disks go in while its
// agent's session opens, not before.
func TestStartAttachesWhileConnecting(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{t: t, version: "1", hotplug: true, refresh: &fakeRefresher{}, attachAwaitsAgent: true}
	m := newManager(t, t.TempDir(), d, &fakeTaps{})
	m.Prepare(ctx, 256, 1, 1)
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	vm, err := m.Start(ctx, vmCfg(m, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Client.Close()
	if len(d.attached) != 1 || len(d.attached[0]) != 2 {
		t.Errorf("attached %+v, want base and upper once", d.attached)
	}
}

// TestStartAttachFailure: the disks go in while the agent's session
// opens; when they fail to, the start fails with that error, the guest
// is not refreshed and the restored VM is killed.
func TestStartAttachFailure(t *testing.T) {
	ctx := context.Background()
	attachErr := errors.New("blockdev-change-medium: no such file")
	d := &fakeDriver{t: t, version: "1", hotplug: true, refresh: &fakeRefresher{}, attachErr: attachErr}
	m := newManager(t, t.TempDir(), d, &fakeTaps{})
	m.Prepare(ctx, 256, 1, 1)
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	killedBefore, clocksBefore := d.killed, d.refresh.clocks
	_, err := m.Start(ctx, vmCfg(m, 1))
	if !errors.Is(err, attachErr) {
		t.Fatalf("start: %v, want the attach error", err)
	}
	if d.killed != killedBefore+1 {
		t.Errorf("the restored VM was not killed")
	}
	if d.refresh.clocks != clocksBefore {
		t.Errorf("the guest was refreshed after its disks failed to go in")
	}
}

// TestTemplateWithoutFileMemory: a VMM that cannot back RAM with a file
// still gets templates, booted with RAM of its own.
func TestTemplateWithoutFileMemory(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{t: t, version: "1", hotplug: true, noFileMemory: true, refresh: &fakeRefresher{}}
	m := newManager(t, t.TempDir(), d, &fakeTaps{})
	m.Prepare(ctx, 256, 1, 1)
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(d.starts) != 2 || !d.starts[0].FileMemory || d.starts[1].FileMemory {
		t.Fatalf("template boots %+v, want one refused with file memory, then one without", d.starts)
	}
	vm, err := m.Start(ctx, vmCfg(m, 1))
	if err != nil {
		t.Fatal(err)
	}
	vm.Client.Close()
	if len(d.restores) != 1 {
		t.Errorf("%d restores, want 1", len(d.restores))
	}
}

// TestStartOtherKernel: a VM of another kernel has no template.
func TestStartOtherKernel(t *testing.T) {
	d := &fakeDriver{t: t, version: "1", hotplug: true, refresh: &fakeRefresher{}}
	m := newManager(t, t.TempDir(), d, &fakeTaps{})
	cfg := vmCfg(m, 1)
	cfg.Kernel = "/other"
	if _, err := m.Start(context.Background(), cfg); !errdefs.IsNotFound(err) {
		t.Fatalf("start: %v, want not found", err)
	}
	if err := m.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(d.starts) != 0 {
		t.Errorf("a template was built for a kernel the daemon does not use")
	}
}

// TestNewCleansUnfinishedBuild: a build a dead daemon left has its TAPs
// removed and its directory dropped.
func TestNewCleansUnfinishedBuild(t *testing.T) {
	dir := t.TempDir()
	build := filepath.Join(dir, buildPrefix+"123")
	if err := os.MkdirAll(filepath.Join(build, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(build, tapsFile), []byte("hsktplabc0\nhsktplabc1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	taps := &fakeTaps{live: []string{"hsktplabc0", "hsktplabc1", "other"}}
	newManager(t, dir, &fakeDriver{t: t, version: "1", refresh: &fakeRefresher{}}, taps)
	if !slices.Equal(taps.live, []string{"other"}) {
		t.Errorf("taps left: %v, want only other", taps.live)
	}
	if _, err := os.Stat(build); !os.IsNotExist(err) {
		t.Errorf("unfinished build dir still there: %v", err)
	}
}

// TestTemplateSlots: with Slots, a template boots with those empty
// removable disks, restores are given them back (and the container's
// disks after the restore), the VM names them for its warm-ups, and a
// daemon with other slots drops the template.
func TestTemplateSlots(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{t: t, version: "1", hotplug: true, refresh: &fakeRefresher{}}
	taps := &fakeTaps{}
	slots := []vmm.Disk{{ReadOnly: true, Serial: "husk-base", Removable: true}, {Serial: "husk-upper", Removable: true}}
	m := newManagerWith(t, Options{Dir: t.TempDir(), Driver: d, Taps: taps, Slots: slots})
	if _, err := m.Start(ctx, vmCfg(m, 1)); !errdefs.IsNotFound(err) {
		t.Fatalf("first start: %v, want not found (no template yet)", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(d.starts) != 1 || !slices.Equal(d.starts[0].Disks, slots) {
		t.Fatalf("template boots = %+v, want one with the slots", d.starts)
	}
	vm, err := m.Start(ctx, vmCfg(m, 1))
	if err != nil {
		t.Fatal(err)
	}
	vm.Client.Close()
	if len(d.restores) != 1 || !slices.Equal(d.restores[0].Disks, slots) {
		t.Errorf("restores = %+v, want one given the slots", d.restores)
	}
	if want := vmCfg(m, 1).Disks; len(d.attached) != 1 || !slices.Equal(d.attached[0], want) {
		t.Errorf("attached %+v, want %+v", d.attached, want)
	}
	if !slices.Equal(vm.Slots, slots) {
		t.Errorf("VM slots %+v, want %+v", vm.Slots, slots)
	}

	other, err := New(ctx, Options{Dir: m.opts.Dir, Driver: d, Kernel: m.opts.Kernel, Initramfs: m.opts.Initramfs, Accel: "tcg", Taps: taps})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if entries, _ := os.ReadDir(m.opts.Dir); len(other.ready) != 0 || len(entries) != 0 {
		t.Errorf("a daemon without slots kept %d templates, %d dirs; want none", len(other.ready), len(entries))
	}
}

// TestRestoreThatHangs: a restored guest whose agent never answers fails
// the start after RestoreTimeout, not the boot's ReadyTimeout, and its
// VM is killed; the container then boots another way.
func TestRestoreThatHangs(t *testing.T) {
	d := &fakeDriver{t: t, version: "1", hotplug: true, refresh: &fakeRefresher{}}
	var logged lockedBuffer
	m := newManagerWith(t, Options{Dir: t.TempDir(), Driver: d, Taps: &fakeTaps{}, RestoreTimeout: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	ctx := context.Background()
	if _, err := m.Start(ctx, vmCfg(m, 1)); !errdefs.IsNotFound(err) {
		t.Fatalf("first start: %v, want not found (no template yet)", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.hungRestores = true
	killed := d.killed
	d.mu.Unlock()

	// Well inside the boot's ReadyTimeout (10 s here).
	outer, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := m.Start(outer, vmCfg(m, 1))
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || outer.Err() != nil {
		t.Fatalf("start from a template whose guest hangs: %v (caller's context: %v), want the restore's own deadline", err, outer.Err())
	}
	d.mu.Lock()
	if d.killed != killed+1 {
		t.Errorf("VMs killed by the failed restore: %d, want 1", d.killed-killed)
	}
	d.mu.Unlock()
	const report = "guest agent did not answer; what its VMM shows"
	if got := logged.String(); strings.Count(got, report) != 1 || !strings.Contains(got, "state=fake") {
		t.Errorf("the hung restore's report is not logged once:\n%s", got)
	}

	// A start its caller gave up on is not the guest's fault: no report.
	logged.Reset()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := m.Start(short, vmCfg(m, 1)); err == nil {
		t.Fatal("a start whose caller gave up succeeded")
	}
	if got := logged.String(); strings.Contains(got, report) {
		t.Errorf("a start the caller cancelled reported a stall:\n%s", got)
	}
}

// TestBuildThatLocksUp: a template boot whose kernel reports a soft
// lockup fails its build then, within the boot's ready timeout, with the
// VM described and killed; the container that asked starts without it.
func TestBuildThatLocksUp(t *testing.T) {
	d := &fakeDriver{t: t, version: "1", lockedBoots: true}
	var logged lockedBuffer
	m := newManagerWith(t, Options{Dir: t.TempDir(), Driver: d, Taps: &fakeTaps{},
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	ctx := context.Background()
	if _, err := m.Start(ctx, vmCfg(m, 0)); !errdefs.IsNotFound(err) {
		t.Fatalf("first start: %v, want not found (no template yet)", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	got := logged.String()
	if !strings.Contains(got, "template build failed") || !strings.Contains(got, "the guest kernel reported a soft lockup: "+lockupLine) {
		t.Errorf("the build's failure does not name the lockup:\n%s", got)
	}
	if strings.Count(got, "guest agent did not answer; what its VMM shows") != 1 {
		t.Errorf("the locked-up boot is not reported once:\n%s", got)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.killed != 1 {
		t.Errorf("VMs killed: %d, want the one that locked up", d.killed)
	}
}

// TestBuildRetranslatedAfterLockup: a template boot whose kernel reports
// a soft lockup has its code translated afresh, boots on, and becomes the
// template the next start restores; under KVM it is not retranslated.
func TestBuildRetranslatedAfterLockup(t *testing.T) {
	for _, tc := range []struct {
		accel         string
		wantTemplate  bool
		wantRetrans   int
		wantLogged    []string
		wantNotLogged []string
	}{
		{accel: "tcg", wantTemplate: true, wantRetrans: 1,
			wantLogged:    []string{"its code was translated afresh", "guest booted on once its code was translated afresh"},
			wantNotLogged: []string{"template build failed"}},
		{accel: "kvm", wantRetrans: 0,
			wantLogged:    []string{"template build failed", "the guest kernel reported a soft lockup: " + lockupLine},
			wantNotLogged: []string{"translated afresh"}},
	} {
		t.Run(tc.accel, func(t *testing.T) {
			d := &fakeDriver{t: t, version: "1", lockedBoots: true, retranslate: true, hotplug: true, refresh: &fakeRefresher{}}
			var logged lockedBuffer
			m := newManagerWith(t, Options{Dir: t.TempDir(), Driver: d, Taps: &fakeTaps{},
				Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			m.opts.Accel = tc.accel
			ctx := context.Background()
			cfg := vmCfg(m, 0)
			cfg.Accel = tc.accel
			if _, err := m.Start(ctx, cfg); !errdefs.IsNotFound(err) {
				t.Fatalf("first start: %v, want not found (no template yet)", err)
			}
			if err := m.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			got := logged.String()
			for _, s := range tc.wantLogged {
				if !strings.Contains(got, s) {
					t.Errorf("log lacks %q:\n%s", s, got)
				}
			}
			for _, s := range tc.wantNotLogged {
				if strings.Contains(got, s) {
					t.Errorf("log has %q:\n%s", s, got)
				}
			}
			vm, err := m.Start(ctx, cfg)
			if tc.wantTemplate && err != nil || !tc.wantTemplate && !errdefs.IsNotFound(err) {
				t.Fatalf("second start: %v, want a template: %v", err, tc.wantTemplate)
			}
			if vm != nil {
				_ = vm.Client.Close()
				discard(vm.Machine)
			}
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.retranslations != tc.wantRetrans {
				t.Errorf("%d retranslations, want %d", d.retranslations, tc.wantRetrans)
			}
		})
	}
}

// lockedBuffer is a log destination for handlers written to from several
// goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lockedBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}
