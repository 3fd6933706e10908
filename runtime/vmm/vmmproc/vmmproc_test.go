package vmmproc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

func TestReadPID(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    int
		ok      bool
	}{
		{"1234\n", 1234, true},
		{"0\n", 0, false},
		{"x", 0, false},
	} {
		if err := WriteFileAtomic(filepath.Join(dir, "pid"), []byte(tc.content)); err != nil {
			t.Fatal(err)
		}
		got, err := ReadPID(dir, "pid")
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("pid file %q: %d, %v; want %d, ok %t", tc.content, got, err, tc.want, tc.ok)
		}
	}
}

// A process is recognised by its working directory, this test's own.
func TestCmdlineIn(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cmdline, ok := CmdlineIn(os.Getpid(), wd)
	if !ok || len(cmdline) == 0 {
		t.Errorf("this process in %s: ok %t, cmdline %q", wd, ok, cmdline)
	}
	if _, ok := CmdlineIn(os.Getpid(), t.TempDir()); ok {
		t.Error("this process recognised in a directory it does not run in")
	}
}

func TestOutputTail(t *testing.T) {
	dir := t.TempDir()
	if got := OutputTail(filepath.Join(dir, "missing")); got[:10] != "no output:" {
		t.Errorf("missing log: %q", got)
	}
	long := make([]byte, 3000)
	for i := range long {
		long[i] = 'a'
	}
	p := filepath.Join(dir, "log")
	if err := os.WriteFile(p, append(long, []byte("end\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := OutputTail(p); len(got) != 2000 || got[len(got)-3:] != "end" {
		t.Errorf("tail of a long log: %d bytes ending %q", len(got), got[len(got)-3:])
	}
}

func TestFindRecorded(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := FindRecorded(dir, "vmm.pid", "vmm", func(int) bool { return true }); !errdefs.IsNotFound(err) {
		t.Fatalf("no pid file: %v, want not found", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vmm.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := FindRecorded(dir, "vmm.pid", "vmm", func(int) bool { return false }); !errdefs.IsNotFound(err) {
		t.Fatalf("another process: %v, want not found", err)
	}
	pid, pidfd, err := FindRecorded(dir, "vmm.pid", "vmm", func(p int) bool { return p == os.Getpid() })
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if pid != os.Getpid() || !PidfdAlive(pidfd) {
		t.Errorf("found pid %d (alive %v), want %d alive", pid, PidfdAlive(pidfd), os.Getpid())
	}
}

func TestKill(t *testing.T) {
	done := make(chan struct{})
	var sent []syscall.Signal
	signal := func(sig syscall.Signal) error {
		sent = append(sent, sig)
		close(done)
		return nil
	}
	if err := Kill("vmm", 1, done, signal); err != nil || len(sent) != 1 || sent[0] != syscall.SIGKILL {
		t.Fatalf("Kill: %v, sent %v, want one SIGKILL", err, sent)
	}
	if err := Kill("vmm", 1, done, signal); err != nil || len(sent) != 1 {
		t.Errorf("Kill of an exited process: %v, sent %v, want nothing sent", err, sent)
	}
	failing := make(chan struct{})
	err := Kill("vmm", 7, failing, func(syscall.Signal) error { return syscall.EPERM })
	if err == nil || err.Error() != "kill vmm 7: operation not permitted" {
		t.Errorf("Kill with a refused signal: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WaitDone(ctx, failing); err != context.Canceled {
		t.Errorf("WaitDone on a cancelled context: %v", err)
	}
	if err := WaitDone(context.Background(), done); err != nil {
		t.Errorf("WaitDone after exit: %v", err)
	}
}

func TestStatNameState(t *testing.T) {
	for _, tc := range []struct {
		stat, name, state string
		ok                bool
	}{
		{"1234 (qemu-system-x86) S 1 1234 1234 0", "qemu-system-x86", "S", true},
		{"1235 (CPU 0/TCG) R 1 1234", "CPU 0/TCG", "R", true},
		{"1236 (a) b) (c) T 1", "a) b) (c", "T", true},
		{"1237 (unterminated S 1", "", "", false},
		{"1238 (nothing after)", "", "", false},
	} {
		name, state, ok := statNameState(tc.stat)
		if name != tc.name || state != tc.state || ok != tc.ok {
			t.Errorf("statNameState(%q) = %q, %q, %v; want %q, %q, %v", tc.stat, name, state, ok, tc.name, tc.state, tc.ok)
		}
	}
}

func TestThreads(t *testing.T) {
	threads, err := Threads(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A Go test binary runs several threads, each listed by its ID.
	if len(threads) < 2 {
		t.Fatalf("threads %q", threads)
	}
	// The main thread first, the others by ID.
	if self := strconv.Itoa(os.Getpid()) + " "; !strings.HasPrefix(threads[0], self) {
		t.Errorf("threads %q do not begin with the main thread %s", threads, self)
	}
	var last int
	for _, th := range threads[1:] {
		tid, err := strconv.Atoi(strings.Fields(th)[0])
		if err != nil || tid <= last {
			t.Errorf("threads %q are not in order of ID", threads)
			break
		}
		last = tid
	}
	if _, err := Threads(0x7ffffff0); err == nil {
		t.Error("threads of a process that does not exist")
	}
}

func TestChildren(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	kids, err := Children(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(kids, cmd.Process.Pid) {
		t.Errorf("children %v lack %d", kids, cmd.Process.Pid)
	}
	if kids, err := Children(cmd.Process.Pid); err != nil || len(kids) != 0 {
		t.Errorf("children of sleep: %v, %v", kids, err)
	}
	if _, err := Children(0x7ffffff0); err == nil {
		t.Error("children of a process that does not exist")
	}
}
