package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
	"github.com/husk-vm/husk/runtime/containers"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/qemu"
)

// TestBootAgainAfterLockup: a cold boot whose kernel reports a soft
// lockup is killed and booted again, with its bind mount served again,
// and `docker start -a` still runs the container to its end. The test
// makes the boot lock up as the one a stress run caught did
// (bench/README.md, *What a guest leaves out*): once the guest's second
// CPU runs its kernel, so that the watchdog runs, it turns the
// instruction a halted vCPU will go on to into a jump to itself, through
// QEMU's gdbstub. Each CPU that wakes there loops, with its interrupts
// still served, until the watchdog says so.
func TestBootAgainAfterLockup(t *testing.T) {
	requireQEMUDaemon(t)
	// A bind mount, so that the second boot needs its virtiofsd started
	// again: the first one exits with the VMM that locked up.
	b := startColdWithShare(t, "booted again\n")
	name, id, short := b.name, b.id, b.id[:12]
	halted := haltedOnceWatched(t, containerVM(id))
	writeGuest(t, containerVM(id), halted, []byte{0xeb, 0xfe}) // jmp .

	r := <-b.done
	if r.Code != 0 || r.Stdout != "booted again\n" {
		t.Errorf("docker start -a after a lockup: exit %d, stdout %q, stderr %q; want the container's output", r.Code, r.Stdout, r.Stderr)
	}
	// The jump is in memory, so translating it afresh does not help.
	if !daemonLogHas(t, "guest kernel locked up while booting; its code was translated afresh", "id="+short, "soft lockup - CPU#") {
		t.Errorf("no line saying the daemon had %s's code translated afresh", short)
	}
	if !daemonLogHas(t, "guest kernel locked up while booting; booting it again", "id="+short, "soft lockup - CPU#") {
		t.Errorf("no line saying the daemon booted %s again after a lockup", short)
	}
	if !daemonLogHas(t, "guest agent did not answer; what its VMM shows", "vm="+short) {
		t.Errorf("no report of the VM that locked up")
	}
	vmDir := filepath.Join(suite.DaemonRoot, "containers", id, "vm")
	console, err := os.ReadFile(filepath.Join(vmDir, "console.log.lockup"))
	if err != nil || !strings.Contains(string(console), "BUG: soft lockup") {
		last, _ := os.ReadFile(filepath.Join(vmDir, "console.log"))
		t.Errorf("the first boot's console: %q, %v; want its lockup (the last boot's: %q)", console, err, last)
	}
	if ps, _ := harness.ProcessesMentioning("process=husk-" + short); len(ps) != 0 {
		t.Errorf("a QEMU of %s still runs after it exited: %+v", name, ps)
	}
	mustDocker(t, "rm", name)
}

// TestBootGoesOnAfterStaleTranslation: a cold boot whose vCPUs spin in
// a translation of code that memory no longer holds, as the stale
// translation in the stress run's hang did (bench/README.md, *What a
// guest leaves out*), goes on with its boot once huskd has the code
// translated afresh, without a boot again. The test makes the guest so:
// it writes a jump to itself where a halted vCPU will resume, through a
// gdbstub, which has QEMU drop its translation there, waits for a vCPU
// to spin in it, and writes the old bytes back through /proc, which QEMU
// does not see. The guest's RAM is a memfd (the bind mount's virtio-fs
// needs it shared), which QEMU maps once, at gpa2hva's address.
func TestBootGoesOnAfterStaleTranslation(t *testing.T) {
	requireQEMUDaemon(t)
	b := startColdWithShare(t, "booted on\n")
	name, id, short := b.name, b.id, b.id[:12]
	staleJump(t, containerVM(id), b.pid, haltedOnceWatched(t, containerVM(id)))

	r := <-b.done
	if r.Code != 0 || r.Stdout != "booted on\n" {
		t.Errorf("docker start -a after a stale translation: exit %d, stdout %q, stderr %q; want the container's output", r.Code, r.Stdout, r.Stderr)
	}
	if !daemonLogHas(t, "guest kernel locked up while booting; its code was translated afresh", "id="+short, "soft lockup - CPU#") {
		t.Errorf("no line saying the daemon had %s's code translated afresh", short)
	}
	if !daemonLogHas(t, "guest booted on once its code was translated afresh", "id="+short) {
		t.Errorf("no line saying %s booted on", short)
	}
	if daemonLogHas(t, "booting it again", "id="+short) {
		t.Errorf("the daemon booted %s again, where its code translated afresh would do", short)
	}
	vmDir := filepath.Join(suite.DaemonRoot, "containers", id, "vm")
	if console, err := os.ReadFile(filepath.Join(vmDir, "console.log")); err != nil || !strings.Contains(string(console), "BUG: soft lockup") {
		t.Errorf("the boot's console: %q, %v; want its lockup", console, err)
	}
	mustDocker(t, "rm", name)
}

// TestTemplateBuildGoesOnAfterStaleTranslation: a template build whose
// guest spins in a stale translation while it boots has its code
// translated afresh, as a container's boot does, and goes on to become
// the template, which the next container of its shape starts from. The
// test makes the stale translation as TestBootGoesOnAfterStaleTranslation
// does, in the build's VM, whose RAM is the template's memory file,
// mapped shared.
func TestTemplateBuildGoesOnAfterStaleTranslation(t *testing.T) {
	requireQEMUDaemon(t)
	img := pulled(t, testimages.Busybox)
	// A shape no other test uses: its first container boots cold and
	// has its template built meanwhile. Its VM holds the limit and the
	// guest's overhead (80 MiB and 1/64).
	const memory, memoryMiB = "296m", "380"
	first := containerName(t, "")
	mustDocker(t, "create", "--name", first, "--memory", memory, img, "sleep", "600")
	started := make(chan result, 1)
	go func() { started <- docker(t, "start", first) }()

	var build, vm string
	var pid int
	eventually(t, "the template build's QEMU started", func() string {
		socks, _ := filepath.Glob(filepath.Join(suite.DaemonRoot, "templates", ".build-*", "run", "qmp.sock"))
		ps, err := harness.ProcessesMentioning("process=husk-template-")
		if err != nil || len(socks) != 1 || len(ps) != 1 {
			return fmt.Sprintf("template builds' monitors %q, QEMUs %+v (%v)", socks, ps, err)
		}
		build, pid = filepath.Dir(socks[0]), ps[0].PID
		vm = templateVM.FindString(ps[0].Cmdline)
		return ""
	})
	staleJump(t, build, pid, haltedOnceWatched(t, build))

	if r := <-started; r.Code != 0 {
		t.Fatalf("docker start %s: %+v", first, r)
	}
	eventually(t, "the template built", func() string {
		if !daemonLogHas(t, "template ready", "memory_mib="+memoryMiB) {
			return "no line saying the " + memory + " template is ready"
		}
		return ""
	})
	if !daemonLogHas(t, "guest kernel locked up while booting; its code was translated afresh", "id="+vm+" ", "soft lockup - CPU#") {
		t.Errorf("no line saying the daemon had %s's code translated afresh", vm)
	}
	if !daemonLogHas(t, "guest booted on once its code was translated afresh", "id="+vm) {
		t.Errorf("no line saying %s booted on", vm)
	}
	if daemonLogHas(t, "template build failed", build) {
		t.Errorf("the template build %s failed", vm)
	}

	second := containerName(t, "-second")
	if r := docker(t, "run", "--name", second, "--memory", memory, img, "echo", "from the template"); r.Code != 0 || r.Stdout != "from the template\n" {
		t.Fatalf("docker run --memory %s: %+v", memory, r)
	}
	id := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", second))
	if !daemonLogHas(t, "container VM restored from a template", "id="+id[:12]) {
		t.Errorf("%s, of the built shape, did not start from its template", second)
	}
	mustDocker(t, "rm", "-f", first, second)
}

// TestRunningGuestRetranslated: a running container's guest, started
// from its image's template, whose vCPU spins in a stale translation of
// kernel code a process runs, has its code translated afresh once its
// kernel reports the lockup, and the process goes on. The container's
// process loops through write(2), counting; the test makes the stale
// translation as TestBootGoesOnAfterStaleTranslation does, at the entry
// of vfs_write, which that process enters with interrupts on and nothing
// held, so that its vCPU spins where the watchdog sees it. (An address
// sampled from the running vCPUs would not do: twice in nine runs the
// sample was one where a spin went unreported, as in the idle loop,
// where a vCPU whose tick was stopped touches the watchdog on each tick
// it takes.) The template's RAM file is mapped privately, so the write
// through /proc stays in this VM.
func TestRunningGuestRetranslated(t *testing.T) {
	requireQEMUDaemon(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	// CAP_SYSLOG, so that /proc/kallsyms shows the guest kernel's
	// addresses.
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, "--cap-add", "SYSLOG", img,
		"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/count; done"))
	short := id[:12]
	pc := kernelSymbol(t, name, "vfs_write")
	if !longInstruction(t, containerVM(id), pc) {
		t.Fatalf("vfs_write (%#x) starts with a one-byte instruction, which the test's jump would overrun", pc)
	}
	staleJump(t, containerVM(id), vmmPID(t, name), pc)

	eventually(t, "the daemon had the code translated afresh", func() string {
		if !daemonLogHas(t, "guest kernel reports a soft lockup; its code was translated afresh", "id="+short, "soft lockup - CPU#") {
			return "no line saying the daemon had " + short + "'s code translated afresh"
		}
		return ""
	})
	if !daemonLogHas(t, "guest kernel reports a soft lockup; what its VMM shows", "vm="+short) {
		t.Errorf("no report of %s's VM", short)
	}
	// The process counts on.
	first := strings.TrimSpace(mustDocker(t, "exec", name, "cat", "/tmp/count"))
	eventually(t, "the count to go on", func() string {
		if now := strings.TrimSpace(mustDocker(t, "exec", name, "cat", "/tmp/count")); now == first {
			return "the count stays at " + now
		}
		return ""
	})
	if got := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Status}}", name)); got != "running" {
		t.Errorf("%s is %s after its lockup, want running", name, got)
	}
	mustDocker(t, "rm", "-f", name)
}

// kernelSymbol is the address of the guest kernel's function sym, read
// from /proc/kallsyms in container name, which needs CAP_SYSLOG to show
// it.
func kernelSymbol(t *testing.T, name, sym string) uint64 {
	t.Helper()
	out := mustDocker(t, "exec", name, "grep", "-E", " [tT] "+sym+"$", "/proc/kallsyms")
	addr, _, _ := strings.Cut(strings.TrimSpace(out), " ")
	pc, err := strconv.ParseUint(addr, 16, 64)
	if err != nil || pc < kernelHalf {
		t.Fatalf("the guest kernel's %s in /proc/kallsyms: %q", sym, out)
	}
	return pc
}

// longInstruction says whether the instruction at the guest kernel's
// address pc is surely longer than one byte, by its first byte.
func longInstruction(t *testing.T, dir string, pc uint64) bool {
	t.Helper()
	var out string
	if err := dirQMP(context.Background(), dir, "human-monitor-command", map[string]string{"command-line": fmt.Sprintf("x /1xb %#x", pc)}, &out); err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndex(out, "0x")
	if i < 0 {
		t.Fatalf("x at %#x: %q", pc, out)
	}
	b, err := strconv.ParseUint(strings.TrimSpace(out[i:]), 0, 8)
	if err != nil {
		t.Fatalf("x at %#x: %q: %v", pc, out, err)
	}
	return b >= 0x40 && b <= 0x4f || b == 0x0f || b == 0xe8 || b == 0xe9 || b == 0xf3
}

// staleJump leaves the guest of the VM in dir running a jump to itself at
// its kernel address pc that memory no longer holds: it writes the jump
// through a gdbstub, which has QEMU drop its translation there, waits for
// a vCPU to spin in it, and writes the old bytes back through the
// /proc/PID/mem of the VM's QEMU, pid, which QEMU does not see.
func staleJump(t *testing.T, dir string, pid int, pc uint64) {
	t.Helper()
	hva := guestHostAddress(t, dir, pc)
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	old := make([]byte, 2)
	if _, err := mem.ReadAt(old, hva); err != nil {
		t.Fatal(err)
	}
	writeGuest(t, dir, pc, []byte{0xeb, 0xfe}) // jmp .
	for deadline := time.Now().Add(commandTimeout); ; time.Sleep(20 * time.Millisecond) {
		cpus, regs, err := vmCPUs(dir)
		if slices.ContainsFunc(cpus, func(c vmm.StalledCPU) bool { return !c.Halted && c.PC == pc }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no vCPU spins at %#x: %v\n%s", pc, err, regs)
		}
	}
	if _, err := mem.WriteAt(old, hva); err != nil {
		t.Fatal(err)
	}
}

// guestHostAddress is where the QEMU in dir maps the guest memory at
// the kernel's virtual address addr.
func guestHostAddress(t *testing.T, dir string, addr uint64) int64 {
	t.Helper()
	hmp := func(cmd string) string {
		var out string
		if err := dirQMP(context.Background(), dir, "human-monitor-command", map[string]string{"command-line": cmd}, &out); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return strings.TrimSpace(out)
	}
	gpa := strings.TrimPrefix(hmp(fmt.Sprintf("gva2gpa %#x", addr)), "gpa: ")
	out := hmp("gpa2hva " + gpa)
	i := strings.LastIndex(out, " is 0x")
	if i < 0 {
		t.Fatalf("gpa2hva %s: %q", gpa, out)
	}
	hva, err := strconv.ParseInt(out[i+len(" is "):], 0, 64)
	if err != nil {
		t.Fatalf("gpa2hva %s: %q: %v", gpa, out, err)
	}
	return hva
}

// requireQEMUDaemon skips a test unless the daemon under test is
// huskd with QEMU, whose monitor the test reaches the guest through.
func requireQEMUDaemon(t *testing.T) {
	t.Helper()
	requireHusk(t)
	if suite.VMM != "qemu" {
		t.Skip("the guest is reached through QEMU's monitor; this daemon runs " + suite.VMM)
	}
}

// coldStart is a cold-booting container started by startColdWithShare.
type coldStart struct {
	name, id string
	pid      int         // its QEMU's
	done     chan result // its docker start -a's end
}

// startColdWithShare creates a container that boots cold and prints
// greeting from a file in a bind mount, starts it attached in the
// background, and waits for its QEMU. The bind mount gives the VM a
// virtiofsd, and guest RAM in a shared memfd.
func startColdWithShare(t *testing.T, greeting string) coldStart {
	t.Helper()
	img := pulled(t, testimages.Busybox)
	b := coldStart{name: containerName(t, ""), done: make(chan result, 1)}
	shared := t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, "greeting"), []byte(greeting), 0o644); err != nil {
		t.Fatal(err)
	}
	b.id = strings.TrimSpace(mustDocker(t, "create", "--name", b.name, "--label", containers.BootLabel+"=cold",
		"-v", shared+":/mnt:ro", img, "cat", "/mnt/greeting"))
	go func() { b.done <- docker(t, "start", "-a", b.name) }()
	eventually(t, "the container's QEMU started", func() string {
		ps, err := harness.ProcessesMentioning("process=husk-" + b.id[:12])
		if err != nil || len(ps) == 0 {
			return "no QEMU for " + b.id[:12]
		}
		b.pid = ps[0].PID
		return ""
	})
	return b
}

// templateVM is a template build VM's ID, in its QEMU's process name.
var templateVM = regexp.MustCompile(`template-[0-9a-f]+`)

// containerVM is the directory container id's QEMU runs in.
func containerVM(id string) string {
	return filepath.Join(suite.DaemonRoot, "containers", id, "vm")
}

// kernelHalf is where an x86-64 Linux kernel's own addresses start.
const kernelHalf = 0xffffffff80000000

// haltedOnceWatched waits until the booting guest of the VM in dir has its
// second CPU in the kernel, so that the boot is past smp_init and its
// watchdog runs, and then for a vCPU halted in the kernel, and returns
// where that vCPU will resume.
func haltedOnceWatched(t *testing.T, dir string) uint64 {
	t.Helper()
	secondCPUInKernel(t, dir)
	for deadline := time.Now().Add(commandTimeout); ; time.Sleep(20 * time.Millisecond) {
		cpus, regs, err := vmCPUs(dir)
		for _, c := range cpus {
			if c.Halted && c.PC >= kernelHalf {
				return c.PC
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no vCPU of the guest halted in its kernel after its second CPU came up: %v\n%s", err, regs)
		}
	}
}

// secondCPUInKernel waits until the booting guest of the VM in dir runs
// its kernel on its second CPU: past smp_init, and a second or more
// before its agent answers, so the monitor is asked often.
func secondCPUInKernel(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(commandTimeout); ; time.Sleep(20 * time.Millisecond) {
		cpus, regs, err := vmCPUs(dir)
		if err == nil && len(cpus) > 1 && cpus[1].PC >= kernelHalf {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest's second CPU never ran its kernel: %v\n%s", err, regs)
		}
	}
}

// vmCPUs reads the vCPUs of the VM in dir through its QEMU's monitor.
func vmCPUs(dir string) ([]vmm.StalledCPU, string, error) {
	var regs string
	err := dirQMP(context.Background(), dir, "human-monitor-command", map[string]string{"command-line": "info registers -a"}, &regs)
	return qemu.ParseCPUs(regs), regs, err
}

// writeGuest writes b into the guest memory of the VM in dir at
// virtual address addr, through a gdbstub its QEMU starts on a socket in
// a directory of the test's that QEMU, run as nobody, can write. The stub stops the VM
// while it is connected; detaching runs it again.
func writeGuest(t *testing.T, dir string, addr uint64, b []byte) {
	t.Helper()
	// t.TempDir's parent is closed to others.
	gdbDir, err := os.MkdirTemp("", "husk-gdb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(gdbDir) })
	if err := os.Chmod(gdbDir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(gdbDir, "gdb.sock")
	var out string
	if err := dirQMP(context.Background(), dir, "human-monitor-command",
		map[string]string{"command-line": "gdbserver unix:" + sock + ",server=on,wait=off"}, &out); err != nil {
		t.Fatalf("start a gdbstub: %v", err)
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("gdbstub: %v (%s)", err, out)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(commandTimeout))
	rd := bufio.NewReader(conn)
	// packet sends one command of GDB's remote protocol and returns its
	// answer's payload, past stop replies.
	packet := func(cmd string) string {
		var sum byte
		for i := 0; i < len(cmd); i++ {
			sum += cmd[i]
		}
		if _, err := fmt.Fprintf(conn, "$%s#%02x", cmd, sum); err != nil {
			t.Fatalf("gdbstub %s: %v", cmd, err)
		}
		for {
			c, err := rd.ReadByte()
			if err != nil {
				t.Fatalf("gdbstub %s: %v", cmd, err)
			}
			if c != '$' {
				continue // acknowledgements
			}
			payload, err := rd.ReadString('#')
			if err != nil {
				t.Fatalf("gdbstub %s: %v", cmd, err)
			}
			if _, err := io.ReadFull(rd, make([]byte, 2)); err != nil {
				t.Fatalf("gdbstub %s: %v", cmd, err)
			}
			_, _ = conn.Write([]byte("+"))
			payload = strings.TrimSuffix(payload, "#")
			// The stop the connection made is reported too.
			if strings.HasPrefix(payload, "T") {
				continue
			}
			return payload
		}
	}
	if got := packet(fmt.Sprintf("M%x,%x:%x", addr, len(b), b)); got != "OK" {
		t.Fatalf("gdbstub write %x at %#x: %q", b, addr, got)
	}
	if got := packet(fmt.Sprintf("m%x,%x", addr, len(b))); got != fmt.Sprintf("%x", b) {
		t.Errorf("gdbstub read back %q at %#x, want %x", got, addr, b)
	}
	// Detaching answers OK and lets the VM run again.
	if got := packet("D"); got != "OK" {
		t.Fatalf("gdbstub detach: %q", got)
	}
}
