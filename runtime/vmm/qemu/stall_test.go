package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/husk-vm/husk/runtime/vmm"
)

func TestParseCPUs(t *testing.T) {
	regs := "CPU#0\nRAX=0000000000000000 RBX=0000000000000000\n" +
		"RIP=ffffffff81a17a0b RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\nES =0000\n" +
		"CPU#1\nRIP=00007f0012345678 RFL=00000202 [-------] CPL=3 II=0 A20=1 SMM=0 HLT=0\n" +
		"CPU#2\nEAX=00000000 EBX=00000000\nEIP=01000000 EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0\n"
	got := ParseCPUs(regs)
	want := []vmm.StalledCPU{{PC: 0xffffffff81a17a0b, Halted: true}, {PC: 0x7f0012345678}, {PC: 0x1000000}}
	if !slices.EqualFunc(got, want, func(a, b vmm.StalledCPU) bool { return a.PC == b.PC && a.Halted == b.Halted }) {
		t.Errorf("ParseCPUs = %+v, want %+v", got, want)
	}
	if got := ParseCPUs("no registers here"); len(got) != 0 {
		t.Errorf("ParseCPUs of nothing = %+v", got)
	}
}

// TestDescribeStall asks a running guest what a hung one would be asked,
// and then a QEMU that answers nothing (stopped with SIGSTOP), which is
// what a QEMU whose main loop is blocked looks like from outside.
func TestDescribeStall(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := vmConfig(t, env, "stall")
	cfg.CPUs = 2
	m := startCounting(t, ctx, New(Options{Binary: env.qemu}), cfg).(*Machine)

	s := m.DescribeStall(ctx)
	if len(s.Errs) != 0 {
		t.Errorf("errors describing a live guest: %v", s.Errs)
	}
	if s.State != "running" {
		t.Errorf("state %q, want running", s.State)
	}
	if len(s.CPUs) != cfg.CPUs {
		t.Fatalf("%d vCPUs described, want %d: %+v", len(s.CPUs), cfg.CPUs, s.CPUs)
	}
	// The guest's init waits for the host, so its vCPUs idle in the
	// kernel, whose text lies in the top 2 GiB.
	for _, c := range s.CPUs {
		if c.Halted && c.PC < 0xffffffff80000000 {
			t.Errorf("a halted vCPU outside the guest kernel: %+v", s.CPUs)
		}
	}
	// The code at each vCPU's PC, read through its page tables, is what
	// lies at the physical address QEMU translates the PC to.
	q, err := m.QMP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range s.CPUs {
		var out string
		if err := q.Execute(ctx, "human-monitor-command", map[string]any{"command-line": fmt.Sprintf("gva2gpa %#x", c.PC), "cpu-index": i}, &out); err != nil {
			t.Fatal(err)
		}
		gpa, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(out), "gpa: 0x"), 16, 64)
		if err != nil {
			t.Fatalf("gva2gpa %#x: %q: %v", c.PC, out, err)
		}
		want, err := examineBytes(ctx, q, i, fmt.Sprintf("xp /%dxb %#x", codeLen, gpa), codeLen)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c.Code, want) {
			t.Errorf("vCPU %d's code at %#x: % x, physical memory has % x", i, c.PC, c.Code, want)
		}
	}
	q.Close()
	// The agent's port has carried the exchanges above.
	if !hasPrefixed(s.Queues, "virtio-serial queue ") || !hasPrefixed(s.Queues, "virtio-scsi queue ") {
		t.Errorf("queues %q lack the agent's serial device or the disks' controller", s.Queues)
	}
	if !containsSub(s.Threads, "CPU 0/TCG") {
		t.Errorf("threads %q lack the first vCPU's", s.Threads)
	}

	if err := syscall.Kill(m.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(m.PID(), syscall.SIGCONT)
	waitStopped(t, m.PID())
	// No deadline but its own: if DescribeStall did not bound its wait
	// for the monitor, this would not return.
	s = m.DescribeStall(context.Background())
	if s.State != "" || len(s.CPUs) != 0 || len(s.Errs) != 1 || !timedOut(s.Errs[0]) {
		t.Errorf("a stopped QEMU described as %+v, want its monitor's timeout alone", s)
	}
	if !containsSub(s.Threads, "CPU 0/TCG T") {
		t.Errorf("a stopped QEMU's threads: %q", s.Threads)
	}
}

// timedOut is an error from a deadline: the context's, or the socket's
// that QMP set from it.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

func hasPrefixed(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func containsSub(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// waitStopped waits until every thread of a process sent SIGSTOP shows
// as stopped.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(stats) == 0 {
			t.Fatalf("threads of %d: %v", pid, err)
		}
		stopped := 0
		for _, p := range stats {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && f[0] == "T" {
				stopped++
			}
		}
		if stopped == len(stats) {
			return
		}
	}
	t.Fatalf("qemu %d did not stop", pid)
}
