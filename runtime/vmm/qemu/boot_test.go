package qemu

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/runtime/vmm"
)

// bootEnv is what a real boot needs: a kernel, an initramfs holding
// testdata/testinit, and QEMU.
type bootEnv struct {
	kernel    kernel.Kernel
	initramfs string
	qemu      string
}

func needBoot(t *testing.T) bootEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("booting VMs needs root")
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 not installed")
	}
	k, err := kernel.Find("")
	if err != nil {
		t.Skipf("no guest kernel: %v", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go toolchain not in PATH (needed to build the test init)")
	}
	tmp := t.TempDir()
	init := filepath.Join(tmp, "testinit")
	build := exec.Command(goBin, "build", "-o", init, "./testdata/testinit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test init: %v\n%s", err, out)
	}
	initrd, err := kernel.BuildInitramfs(context.Background(), k, init, "", filepath.Join(tmp, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	return bootEnv{kernel: k, initramfs: initrd, qemu: qemu}
}

// longDir returns a directory whose socket paths are far beyond the
// 108-byte unix socket limit.
func longDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), strings.Repeat("a-very-long-vm-directory-name-", 6))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if n := len(filepath.Join(dir, agentSocket)); n <= 108 {
		t.Fatalf("dir only %d bytes long", n)
	}
	return dir
}

func disk(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 1<<20); err != nil {
		t.Fatal(err)
	}
	return p
}

// exchange sends line and returns the reply line.
func exchange(ctx context.Context, c net.Conn, line string) (string, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(reply), err
}

func processGone(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return os.IsNotExist(err)
}

// TestBootAndReattach boots one VM per machine type through the driver
// with two disks, talks to its init over the agent port, reattaches to it
// from a second driver, and kills it from there.
//
// microvm is booted only on request (HUSK_QEMU_MICROVM=1): under TCG on a
// busy host its guests hang in early boot (see the package doc), so on a
// shared CI machine its result says more about the load than the driver.
func TestBootAndReattach(t *testing.T) {
	env := needBoot(t)
	for _, machine := range []string{MachineQ35, MachineMicroVM} {
		t.Run(machine, func(t *testing.T) {
			if machine == MachineMicroVM && os.Getenv("HUSK_QEMU_MICROVM") != "1" {
				t.Skip("microvm boots only with HUSK_QEMU_MICROVM=1: it hangs under TCG on a loaded host")
			}
			testBootAndReattach(t, env, machine)
		})
	}
}

func testBootAndReattach(t *testing.T, env bootEnv, machine string) {
	// A safety net so a broken guest cannot hang the test run; no
	// assertion depends on it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	dir := longDir(t)
	cfg := vmm.Config{
		ID:        "boot-test",
		Dir:       dir,
		Kernel:    env.kernel.Path,
		Initramfs: env.initramfs,
		MemoryMiB: 256,
		CPUs:      1,
		Accel:     "tcg",
		Disks: []vmm.Disk{
			{Path: disk(t, dir, "base.img"), ReadOnly: true, Serial: "husk-base"},
			{Path: disk(t, dir, "upper.img"), Serial: "husk-upper"},
		},
	}
	drv := New(Options{Binary: env.qemu, Machine: machine})
	start := time.Now()
	m, err := drv.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pid := m.PID()
	t.Cleanup(func() {
		m.Kill()
		m.Cleanup()
	})
	started := time.Since(start)
	// Run as root, the driver confines QEMU to the unprivileged "nobody".
	if nobody, err := user.Lookup("nobody"); err == nil && os.Geteuid() == 0 {
		eventuallyUID(t, pid, nobody.Uid)
	}

	c, err := m.DialAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The init answers only once it has opened the port, and QEMU holds
	// what we send until then, so one request measures boot to ready.
	reply, err := exchange(ctx, c, "hello")
	if err != nil {
		t.Fatalf("agent reply: %v\nconsole:\n%s", err, readFile(dir, consoleLog))
	}
	ready := time.Since(start)
	// Which disk the guest names sda depends on the order its SCSI scan
	// finishes in, which varies under load; the agent finds disks by
	// serial, so only serials and modes count.
	if want := "ready sda=husk-base:ro sdb=husk-upper:rw"; diskSet(reply) != diskSet(want) {
		t.Fatalf("guest said %q, want %q (in any order)\nconsole:\n%s", reply, want, readFile(dir, consoleLog))
	}
	t.Logf("%s: QEMU up (query-status running) after %v, guest ready after %v", machine, started, ready)
	if r, err := exchange(ctx, c, "ping"); err != nil || r != "pong" {
		t.Fatalf("ping: %q, %v", r, err)
	}
	c.Close()

	// A second driver, as after a daemon restart.
	m2, err := New(Options{Binary: env.qemu}).Reattach(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if m2.PID() != pid {
		t.Errorf("reattached pid %d, want %d", m2.PID(), pid)
	}
	// QEMU listens again after the first client left.
	c2, err := m2.DialAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := exchange(ctx, c2, "ping"); err != nil || r != "pong" {
		t.Fatalf("ping after reattach: %q, %v", r, err)
	}
	c2.Close()

	if err := m2.Cleanup(); err == nil {
		t.Error("Cleanup succeeded while QEMU runs")
	}
	if err := m2.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := m2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DialAgent(ctx); err == nil {
		t.Error("DialAgent succeeded after the VMM exited")
	}
	for _, mm := range []vmm.Machine{m2, m} {
		if err := mm.Cleanup(); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{agentSocket, qmpSocket, pidFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s left after Cleanup (%v)", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, consoleLog)); err != nil {
		t.Errorf("console log gone: %v", err)
	}
	if !processGone(pid) {
		t.Errorf("QEMU %d still in /proc after Wait", pid)
	}
	if _, err := New(Options{}).Reattach(ctx, dir); err == nil {
		t.Error("Reattach succeeded to a dead VM")
	}
}

// TestStartShutdown starts a VM and ends it through QMP quit without
// waiting for the guest; a VM that cannot start leaves nothing behind.
func TestStartShutdown(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	drv := New(Options{Binary: env.qemu})

	dir := t.TempDir()
	cfg := vmm.Config{ID: "quit", Dir: dir, Kernel: env.kernel.Path, Initramfs: env.initramfs}
	m, err := drv.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Start(ctx, cfg); err == nil {
		t.Error("second Start in the same dir succeeded")
	}
	qm := m.(*Machine)
	if err := qm.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if !processGone(m.PID()) {
		t.Errorf("QEMU %d still in /proc after Shutdown", m.PID())
	}

	bad := cfg
	bad.Dir = t.TempDir()
	bad.Kernel = filepath.Join(bad.Dir, "no-such-kernel")
	if _, err := drv.Start(ctx, bad); err == nil || !strings.Contains(err.Error(), "no-such-kernel") {
		t.Errorf("Start with a missing kernel: err = %v, want QEMU's complaint about it", err)
	}
	for _, f := range []string{agentSocket, qmpSocket, pidFile} {
		if _, err := os.Stat(filepath.Join(bad.Dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s left after a failed Start (%v)", f, err)
		}
	}
}

func readFile(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return string(b)
}

// eventuallyUID waits until QEMU has switched to uid (it does so once its
// files are open, just before the guest starts) and fails if it never does.
func eventuallyUID(t *testing.T, pid int, uid string) {
	t.Helper()
	var last string
	for range 200 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatalf("read status of QEMU: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				last = f[1]
			}
		}
		if last == uid {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("QEMU runs with real uid %s, want %s (nobody)", last, uid)
}

// TestPVHBoot boots the host's kernel through its PVH entry, from the ELF
// the driver extracts into its kernel cache, and boots a file that is not
// a bzImage as it is.
func TestPVHBoot(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cache := t.TempDir()
	drv := New(Options{Binary: env.qemu, KernelCache: cache})
	elfPath, err := drv.bootKernel(ctx, env.kernel.Path)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(elfPath) != cache {
		t.Skipf("%s boots as a bzImage (%s)", env.kernel.Path, elfPath)
	}
	m, err := drv.Start(ctx, vmConfig(t, env, "pvh"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(m) })
	if r := say(t, ctx, m, "ping"); r != "pong" {
		t.Errorf("guest booted through PVH answered %q, want pong", r)
	}
	if got := argAfter(qemuCommandLine(t, m), "-kernel"); !slices.Equal(got, []string{elfPath}) {
		t.Errorf("-kernel %q, want the extracted %s", got, elfPath)
	}

	notBz := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(notBz, []byte("\x7fELF not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := drv.bootKernel(ctx, notBz); err != nil || got != notBz {
		t.Errorf("boot file for a non-bzImage: %q, %v; want it as it is", got, err)
	}
}

// qemuCommandLine is the arguments m's QEMU runs with.
func qemuCommandLine(t *testing.T, m vmm.Machine) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", m.PID()))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// diskSet is a testinit "ready" reply without the guest's device names:
// its serial:mode pairs, sorted.
func diskSet(reply string) string {
	fields := strings.Fields(reply)
	for i, f := range fields {
		if _, v, ok := strings.Cut(f, "="); ok {
			fields[i] = v
		}
	}
	slices.Sort(fields)
	return strings.Join(fields, " ")
}
