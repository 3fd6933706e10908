package cloudhypervisor

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
)

// testTimeout only keeps a broken driver from hanging the run; nothing
// asserts on how long anything takes.
const testTimeout = time.Minute

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// fakeDriver returns a driver whose binary is the fake cloud-hypervisor.
func fakeDriver(t *testing.T, opts Options) *Driver {
	t.Helper()
	t.Setenv(fakeEnv, "1")
	t.Setenv(fakeSpecEnv, needSpec(t))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts.Binary = exe
	if opts.AgentAttemptTimeout == 0 {
		opts.AgentAttemptTimeout = 2 * time.Second
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// files is what a test VM boots with.
type files struct {
	kernel, initramfs, base, upper string
}

func makeFiles(t *testing.T, dir string) files {
	t.Helper()
	f := files{
		kernel:    filepath.Join(dir, "vmlinuz"),
		initramfs: filepath.Join(dir, "initramfs.cpio"),
		base:      filepath.Join(dir, "base.ext4"),
		upper:     filepath.Join(dir, "upper.ext4"),
	}
	for p, content := range map[string]string{f.kernel: "bzImage", f.initramfs: "cpio", f.base: "base", f.upper: "upper"} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// vmDir returns a VM directory whose socket paths are far beyond the
// 108-byte unix socket limit.
func vmDir(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), strings.Repeat("a-very-long-vm-directory-name-", 4), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if n := len(filepath.Join(dir, vsockSocket)); n <= 108 {
		t.Fatalf("dir only %d bytes long", n)
	}
	return dir
}

func config(id, dir string, f files, tap string) vmm.Config {
	return vmm.Config{
		ID: id, Dir: dir, Kernel: f.kernel, Initramfs: f.initramfs, MemoryMiB: 128, CPUs: 1,
		Disks: []vmm.Disk{{Path: f.base, ReadOnly: true, Serial: "base"}, {Path: f.upper, Serial: "upper"}},
		Nets:  []vmm.Net{{Tap: tap, MAC: "52:54:00:12:34:56"}},
	}
}

// killOnCleanup makes sure no fake outlives a failed test.
func killOnCleanup(t *testing.T, m vmm.Machine) {
	t.Cleanup(func() {
		m.Kill()
		m.Cleanup()
	})
}

// echo checks the agent channel: the fake guest echoes.
func echo(t *testing.T, m vmm.Machine, msg string) {
	t.Helper()
	c, err := m.DialAgent(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testTimeout))
	fmt.Fprintln(c, msg)
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || strings.TrimSpace(got) != msg {
		t.Fatalf("agent echo: %q %v, want %q", got, err, msg)
	}
}

// tree lists a directory's files with their modes and contents' digests.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		}
		out[strings.TrimPrefix(p, dir)] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestLifecycle drives the driver through a VM's life against the fake
// cloud-hypervisor: create and boot, info, the agent channel, counters,
// resize, pause, snapshot, resume, reattach, restore into a fresh VMM
// with rewritten paths, error answers, and shutdown.
func TestLifecycle(t *testing.T) {
	d := fakeDriver(t, Options{MaxCPUs: 2, RestoreMode: RestoreModeOnDemand})
	ctx := testCtx(t)
	f := makeFiles(t, t.TempDir())
	dir := vmDir(t, "vm1")

	mv, err := d.Start(ctx, config("vm1", dir, f, "tap-one"))
	if err != nil {
		t.Fatal(err)
	}
	killOnCleanup(t, mv)
	m := mv.(*Machine)
	if pid, err := vmmproc.ReadPID(dir, pidFile); err != nil || pid != m.PID() {
		t.Errorf("pid file: %d %v, want %d", pid, err, m.PID())
	}
	info, err := m.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != StateRunning {
		t.Errorf("state %s after Start, want Running", info.State)
	}
	c := info.Config
	if len(c.Disks) != 2 || !c.Disks[0].Readonly || c.Disks[1].Readonly || c.Disks[0].Serial != "base" || c.Disks[1].Path != f.upper {
		t.Errorf("disks %+v", c.Disks)
	}
	if len(c.Net) != 1 || c.Net[0].Tap != "tap-one" || c.Net[0].MAC != "52:54:00:12:34:56" {
		t.Errorf("nets %+v", c.Net)
	}
	if c.Vsock == nil || c.Vsock.Socket != vsockSocket || c.Vsock.CID != guestCID {
		t.Errorf("vsock %+v, want the relative socket %s", c.Vsock, vsockSocket)
	}
	if c.Serial == nil || c.Serial.Mode != ModeFile || c.Serial.File != consoleLog || c.Console == nil || c.Console.Mode != ModeOff {
		t.Errorf("serial %+v console %+v", c.Serial, c.Console)
	}
	if c.Payload.Kernel != f.kernel || !strings.HasPrefix(c.Payload.Cmdline, "console=ttyS0") || !strings.Contains(c.Payload.Cmdline, " cryptomgr.notests") {
		t.Errorf("payload %+v", c.Payload)
	}
	if b, err := os.ReadFile(filepath.Join(dir, consoleLog)); err != nil || !strings.Contains(string(b), "fake guest up") {
		t.Errorf("console.log: %q %v", b, err)
	}
	echo(t, m, "hello")

	counters, err := m.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counters["disk0"]["read_bytes"] != 512 || counters["net0"] == nil {
		t.Errorf("counters %v", counters)
	}
	if err := m.Resize(ctx, 2, 256); err != nil {
		t.Fatal(err)
	}
	if info, err := m.Info(ctx); err != nil || info.Config.CPUs.BootVCPUs != 2 || info.Config.Memory.Size != 256<<20 {
		t.Errorf("after resize: %+v %v", info, err)
	}
	// A CH error answer becomes a clear, classified husk error.
	err = m.Resize(ctx, 8, 0)
	if err == nil || !errdefs.IsInternal(err) ||
		!strings.Contains(err.Error(), "resize vm: cloud-hypervisor vm.resize: 500 Internal Server Error: Error from API: Error resizing VM: Failed to resize vCPUs: 8 requested, at most 2") {
		t.Errorf("resize beyond max: %v", err)
	}

	snap := t.TempDir()
	if err := m.Snapshot(ctx, snap); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("snapshot of a running vm: %v, want FailedPrecondition", err)
	}
	for range 2 { // pausing a paused VM is no error
		if err := m.Pause(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, snap); !slices.Equal(got, []string{"config.json", MetadataFile, "memory-ranges", "state.json"}) {
		t.Errorf("snapshot files %v", got)
	}
	md, err := ReadMetadata(snap)
	if err != nil {
		t.Fatal(err)
	}
	kernelSum := sha256.Sum256([]byte("bzImage"))
	if md.VMMVersion != "cloud-hypervisor v53.0" || md.KernelSHA256 != hex.EncodeToString(kernelSum[:]) || md.VMM != Name {
		t.Errorf("metadata %+v", md)
	}
	if info, err := m.Info(ctx); err != nil || info.State != StatePaused {
		t.Errorf("after snapshot: %+v %v, want still paused", info, err)
	}
	for range 2 { // resuming a running VM is no error
		if err := m.Resume(ctx); err != nil {
			t.Fatal(err)
		}
	}
	echo(t, m, "after resume")

	// A second driver (a restarted daemon) finds the VM again.
	rm, err := fakeDriver(t, Options{}).Reattach(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if rm.PID() != m.PID() {
		t.Errorf("reattached pid %d, want %d", rm.PID(), m.PID())
	}

	// Restore into a new VM: new directory, new upper disk, new TAP. The
	// snapshot is read-only to everyone but root; its tree must not change.
	upper2 := filepath.Join(filepath.Dir(f.upper), "upper2.ext4")
	if err := os.WriteFile(upper2, []byte("upper2"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := tree(t, snap)
	dir2 := vmDir(t, "vm2")
	cfg2 := config("vm2", dir2, f, "tap-two")
	cfg2.Disks[1].Path = upper2
	m2v, err := d.Restore(ctx, cfg2, snap)
	if err != nil {
		t.Fatal(err)
	}
	killOnCleanup(t, m2v)
	m2 := m2v.(*Machine)
	if m2.PID() == m.PID() {
		t.Fatal("restore reused the old process")
	}
	var rewritten map[string]any
	b, err := os.ReadFile(filepath.Join(dir2, restoreDir, snapshotConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rewritten); err != nil {
		t.Fatal(err)
	}
	disks := list(rewritten, "disks")
	nets := list(rewritten, "net")
	vs, _ := rewritten["vsock"].(map[string]any)
	serial, _ := rewritten["serial"].(map[string]any)
	if len(disks) != 2 || disks[0]["path"] != f.base || disks[0]["readonly"] != true || disks[1]["path"] != upper2 ||
		disks[1]["direct"] != false || // a field the driver does not know survives
		len(nets) != 1 || nets[0]["tap"] != "tap-two" || nets[0]["mac"] != "52:54:00:12:34:56" ||
		vs["socket"] != vsockSocket || serial["file"] != consoleLog || rewritten["iommu"] != false {
		t.Errorf("rewritten config.json: %s", b)
	}
	for _, name := range []string{"state.json", "memory-ranges"} {
		if target, err := os.Readlink(filepath.Join(dir2, restoreDir, name)); err != nil || target != filepath.Join(snap, name) {
			t.Errorf("restore/%s -> %q %v, want a link into the snapshot", name, target, err)
		}
	}
	var asked RestoreConfig
	if b, err := os.ReadFile(filepath.Join(dir2, fakeRestoreRecord)); err != nil || json.Unmarshal(b, &asked) != nil {
		t.Fatalf("restore record: %s %v", b, err)
	}
	if asked.MemoryRestoreMode != RestoreOnDemand || !asked.Resume || asked.SourceURL != "file://"+filepath.Join(dir2, restoreDir) {
		t.Errorf("vm.restore body %+v", asked)
	}
	if info, err := m2.Info(ctx); err != nil || info.State != StateRunning || info.Config.Disks[1].Path != upper2 {
		t.Errorf("restored vm: %+v %v", info, err)
	}
	echo(t, m2, "restored")
	if after := tree(t, snap); !mapsEqual(before, after) {
		t.Errorf("snapshot changed by restore:\nbefore %v\nafter  %v", before, after)
	}

	// Out-of-order calls get cloud-hypervisor's errors, classified.
	if err := m2.api.put(ctx, "vm.boot", nil); !errdefs.IsFailedPrecondition(err) ||
		!strings.Contains(err.Error(), "cloud-hypervisor vm.boot: 405 Method Not Allowed: Error from API: The VM could not be booted: Invalid state transition: Running to Running") {
		t.Errorf("boot of a running vm: %v", err)
	}

	for _, mm := range []*Machine{m, m2} {
		if err := mm.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if err := mm.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat("/proc/" + fmt.Sprint(mm.PID())); err == nil {
			t.Errorf("process %d still there after Shutdown", mm.PID())
		}
		for _, name := range []string{apiSocket, apiLock, vsockSocket, pidFile, restoreDir} {
			if _, err := os.Lstat(filepath.Join(mm.Dir(), name)); err == nil {
				t.Errorf("%s left in %s after Cleanup", name, mm.Dir())
			}
		}
	}
	if err := rm.Wait(ctx); err != nil {
		t.Errorf("reattached machine did not see the exit: %v", err)
	}
	rm.Cleanup()
	if _, err := m.DialAgent(ctx); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("DialAgent after exit: %v", err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestRestoreRefused: a snapshot from another cloud-hypervisor version or
// another kernel, or one that does not fit the new VM, is refused with a
// clear error, leaving no process and no file behind.
func TestRestoreRefused(t *testing.T) {
	d := fakeDriver(t, Options{})
	ctx := testCtx(t)
	f := makeFiles(t, t.TempDir())
	mv, err := d.Start(ctx, config("src", vmDir(t, "src"), f, "tap0"))
	if err != nil {
		t.Fatal(err)
	}
	killOnCleanup(t, mv)
	m := mv.(*Machine)
	snap := t.TempDir()
	if err := m.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	otherKernel := filepath.Join(t.TempDir(), "vmlinuz")
	if err := os.WriteFile(otherKernel, []byte("another bzImage"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		version string
		mod     func(*vmm.Config)
		is      func(error) bool
		want    string
	}{
		{"other version", "v52.0", func(*vmm.Config) {}, errdefs.IsFailedPrecondition,
			"snapshot was taken with cloud-hypervisor v53.0, this is cloud-hypervisor v52.0"},
		{"other kernel", "", func(c *vmm.Config) { c.Kernel = otherKernel }, errdefs.IsFailedPrecondition,
			"snapshot was taken with kernel sha256:"},
		{"fewer disks", "", func(c *vmm.Config) { c.Disks = c.Disks[:1] }, errdefs.IsInvalidArgument,
			"snapshot has 2 disks, the new vm 1"},
		{"missing disk", "", func(c *vmm.Config) { c.Disks[1].Path = "/nonexistent/upper.ext4" }, errdefs.IsInternal,
			"Cannot open disk path /nonexistent/upper.ext4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.version != "" {
				t.Setenv(fakeVersionEnv, tt.version)
			}
			dir := vmDir(t, "new")
			cfg := config("new", dir, f, "tap1")
			tt.mod(&cfg)
			mm, err := d.Restore(ctx, cfg, snap)
			if err == nil {
				mm.Kill()
				mm.Cleanup()
				t.Fatal("restore succeeded")
			}
			if !tt.is(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q of the right class", err, tt.want)
			}
			if left := entries(t, dir); len(left) != 0 {
				t.Errorf("files left in the new vm dir: %v", left)
			}
		})
	}
}

// TestStartFails: a VM cloud-hypervisor refuses to boot leaves no
// process, and the error says why.
func TestStartFails(t *testing.T) {
	d := fakeDriver(t, Options{})
	ctx := testCtx(t)
	f := makeFiles(t, t.TempDir())
	dir := vmDir(t, "bad")
	cfg := config("bad", dir, f, "tap0")
	cfg.Disks[1].Path = filepath.Join(dir, "missing.ext4")
	_, err := d.Start(ctx, cfg)
	if err == nil || !errdefs.IsInternal(err) ||
		!strings.Contains(err.Error(), "start vm bad: cloud-hypervisor vm.boot: 500 Internal Server Error: Error from API: The VM could not boot: Cannot open disk path") {
		t.Fatalf("err = %v", err)
	}
	pids, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, p := range pids {
		if cwd, err := os.Readlink(p); err == nil && cwd == dir {
			t.Errorf("a process still runs in %s: %s", dir, p)
		}
	}
	for _, name := range []string{apiSocket, vsockSocket, pidFile} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s left behind", name)
		}
	}
	// Nothing answers on a socket that is not there.
	if _, err := net.Dial("unix", filepath.Join(dir, apiSocket)); err == nil {
		t.Error("api socket still answers")
	}
}

// TestNICHotplug plugs a NIC into a running VM of the fake and unplugs
// the boot NIC, through requests the API description accepts.
func TestNICHotplug(t *testing.T) {
	d := fakeDriver(t, Options{})
	ctx := testCtx(t)
	f := makeFiles(t, t.TempDir())
	mv, err := d.Start(ctx, config("vm1", vmDir(t, "vm1"), f, "tap-one"))
	if err != nil {
		t.Fatal(err)
	}
	killOnCleanup(t, mv)
	h, ok := mv.(vmm.NICHotplugger)
	if !ok {
		t.Fatal("cloud-hypervisor machines do not hot-plug NICs")
	}
	m := mv.(*Machine)
	if err := h.AddNIC(ctx, vmm.Net{Tap: "tap-two", MAC: "02:42:0A:7C:00:03"}); err != nil {
		t.Fatal(err)
	}
	info, err := m.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []NetConfig{{Tap: "tap-one", MAC: "52:54:00:12:34:56", ID: "net0"}, {Tap: "tap-two", MAC: "02:42:0a:7c:00:03", ID: "net1"}}
	if !slices.Equal(info.Config.Net, want) {
		t.Errorf("nets after AddNIC %+v, want %+v", info.Config.Net, want)
	}
	if err := h.AddNIC(ctx, vmm.Net{Tap: "tap-three", MAC: "02:42:0a:7c:00:03"}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("AddNIC of a MAC the VM has: %v, want already exists", err)
	}
	if err := h.RemoveNIC(ctx, "52:54:00:12:34:56"); err != nil {
		t.Fatal(err)
	}
	if info, err = m.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Config.Net, want[1:]) {
		t.Errorf("nets after RemoveNIC %+v, want %+v", info.Config.Net, want[1:])
	}
	if err := h.RemoveNIC(ctx, "52:54:00:12:34:56"); !errdefs.IsNotFound(err) {
		t.Errorf("RemoveNIC of a NIC that is gone: %v, want not found", err)
	}
	// The next NIC takes the id the removed one freed.
	if err := h.AddNIC(ctx, vmm.Net{Tap: "tap-four", MAC: "02:42:0a:7c:00:04"}); err != nil {
		t.Fatal(err)
	}
	if info, err = m.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(info.Config.Net); n != 2 || info.Config.Net[1].ID != "net0" {
		t.Errorf("nets after a second AddNIC %+v, want net1 and net0", info.Config.Net)
	}
}

// TestDiskHotplug is a template's path on the fake: a VM booted without
// disks is snapshotted, restored, given the container's disks by
// hot-plug, snapshotted again (a checkpoint) and that snapshot restored
// with the disks at boot; the pool's undo unplugs them. Every request is
// one the API description accepts (TestRequestBodiesMatchSpec).
func TestDiskHotplug(t *testing.T) {
	d := fakeDriver(t, Options{RestoreMode: RestoreModeOnDemand})
	ctx := testCtx(t)
	f := makeFiles(t, t.TempDir())
	tplCfg := config("tpl", vmDir(t, "tpl"), f, "tap-tpl")
	tplCfg.Disks = nil
	tpl, err := d.Start(ctx, tplCfg)
	if err != nil {
		t.Fatal(err)
	}
	killOnCleanup(t, tpl)
	tplSnap := t.TempDir()
	if err := tpl.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tpl.Snapshot(ctx, tplSnap); err != nil {
		t.Fatal(err)
	}
	if err := tpl.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	ctrDir := vmDir(t, "ctr")
	cfg := config("ctr", ctrDir, f, "tap-ctr")
	disks := cfg.Disks
	cfg.Disks = nil
	mv, err := d.Restore(ctx, cfg, tplSnap)
	if err != nil {
		t.Fatal(err)
	}
	killOnCleanup(t, mv)
	var rc RestoreConfig
	if b, err := os.ReadFile(filepath.Join(ctrDir, fakeRestoreRecord)); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &rc); err != nil || rc.MemoryRestoreMode != RestoreOnDemand {
		t.Errorf("restore request %s (%v): want memory_restore_mode %s", b, err, RestoreOnDemand)
	}
	m := mv.(*Machine)
	if err := m.AttachDisks(ctx, []vmm.Disk{{Path: filepath.Join(t.TempDir(), "missing.ext4"), Serial: "gone"}}); err == nil {
		t.Error("AttachDisks of a missing file succeeded")
	}
	if err := m.AttachDisks(ctx, disks); err != nil {
		t.Fatal(err)
	}
	info, err := m.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []DiskConfig{{Path: f.base, Readonly: true, Serial: "base", ID: "disk0"}, {Path: f.upper, Serial: "upper", ID: "disk1"}}
	if !slices.Equal(info.Config.Disks, want) {
		t.Errorf("disks after AttachDisks %+v, want %+v", info.Config.Disks, want)
	}

	// A checkpoint of the container restores with its disks given at boot.
	snap := t.TempDir()
	if err := m.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	again := config("again", vmDir(t, "again"), f, "tap-again")
	// BeforeResume runs on a VM restored but paused, and it alone
	// decides whether the VM resumes.
	var gateState string
	again.BeforeResume = func(ctx context.Context) error {
		// Through the directory's descriptor, as the driver reaches it:
		// the test's directory is longer than a socket path may be.
		dir, err := vmmproc.OpenDir(again.Dir)
		if err != nil {
			return err
		}
		defer dir.Close()
		c := newClient(func() string { return fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), apiSocket) })
		defer c.close()
		var info VmInfo
		err = c.get(ctx, "vm.info", &info)
		gateState = info.State
		return err
	}
	rv, err := d.Restore(ctx, again, snap)
	if err != nil {
		t.Fatalf("restore a checkpoint of a template-started VM: %v", err)
	}
	killOnCleanup(t, rv)
	if gateState != StatePaused {
		t.Errorf("VM state in BeforeResume %q, want %q", gateState, StatePaused)
	}
	if info, err := rv.(*Machine).Info(ctx); err != nil || info.State != StateRunning {
		t.Errorf("VM state after Restore %q (%v), want %q", info.State, err, StateRunning)
	}
	refused := config("refused", vmDir(t, "refused"), f, "tap-refused")
	errMismatch := errors.New("files do not match")
	refused.BeforeResume = func(context.Context) error { return errMismatch }
	if _, err := d.Restore(ctx, refused, snap); !errors.Is(err, errMismatch) {
		t.Errorf("restore refused by BeforeResume: err = %v, want %v", err, errMismatch)
	}
	for _, name := range []string{apiSocket, pidFile} {
		if _, err := os.Stat(filepath.Join(refused.Dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s left after a refused restore (%v)", name, err)
		}
	}

	if err := m.DetachDisks(ctx, 3); !errdefs.IsInvalidArgument(err) {
		t.Errorf("DetachDisks of 3 of 2 disks: %v, want invalid argument", err)
	}
	if err := m.DetachDisks(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if info, err = m.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Config.Disks, want[:1]) {
		t.Errorf("disks after DetachDisks(1) %+v, want %+v", info.Config.Disks, want[:1])
	}
	// The freed id is taken again.
	if err := m.AttachDisks(ctx, disks[1:]); err != nil {
		t.Fatal(err)
	}
	if info, err = m.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Config.Disks, want) {
		t.Errorf("disks after a second AttachDisks %+v, want %+v", info.Config.Disks, want)
	}
}
