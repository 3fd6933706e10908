package vmm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// describedMachine is a Machine whose VMM describes its guest; the
// methods ReportStall does not call are left to the nil interface.
type describedMachine struct {
	Machine
	stall Stall
}

func (m describedMachine) PID() int                                { return 4242 }
func (m describedMachine) DescribeStall(ctx context.Context) Stall { return m.stall }

type silentMachine struct{ Machine }

func TestReportStall(t *testing.T) {
	symbol := func(pc uint64) string {
		if pc == 0xffffffff81a17a0b {
			return "native_safe_halt+0xb"
		}
		return ""
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	m := describedMachine{stall: Stall{
		State:   "running",
		CPUs:    []StalledCPU{{PC: 0xffffffff81a17a0b, Halted: true}, {PC: 0x7f00001000}},
		Queues:  []string{"virtio-serial queue 3: posted 3, used 2, in QEMU 1"},
		Threads: []string{"11 CPU 0/TCG S futex_do_wait syscall 202"},
		Errs:    []error{errors.New("qmp x-query-virtio: no such command")},
	}}
	ctx := context.Background()
	ready, cancel := context.WithTimeout(ctx, 0)
	defer cancel()
	// The test's own process stands in for a live back end; pid
	// 0x7ffffff0 for one that is gone.
	ReportStall(ctx, ready, log, "abc123", m, symbol, os.Getpid(), 0x7ffffff0)
	out := buf.String()
	for _, want := range []string{
		"level=WARN", "vm=abc123", "vmm_pid=4242", "state=running",
		"0: 0xffffffff81a17a0b native_safe_halt+0xb (halted); 1: 0x7f00001000",
		"virtio-serial queue 3: posted 3, used 2", "CPU 0/TCG S futex_do_wait",
		"unknown=\"qmp x-query-virtio: no such command; threads of 2147483632: ",
		fmt.Sprintf("backends=\"pid %d: %d ", os.Getpid(), os.Getpid()),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	// A wait ended by a watch that saw the guest stuck is reported too.
	buf.Reset()
	watched, giveUp := context.WithCancelCause(ctx)
	giveUp(errors.New("soft lockup"))
	ReportStall(ctx, watched, log, "abc123", m, symbol)
	if !strings.Contains(buf.String(), "guest agent did not answer") {
		t.Errorf("a wait given up with a cause logged %q, want the report", buf.String())
	}

	buf.Reset()
	ReportStall(ctx, ready, log, "abc123", silentMachine{}, symbol)
	if buf.Len() != 0 {
		t.Errorf("a VMM that cannot describe its guest logged %q", buf.String())
	}

	// Waits given up for other reasons than the guest's silence.
	gone, cancelGone := context.WithCancel(ctx)
	cancelGone()
	goneNoCause, cancelNoCause := context.WithCancelCause(ctx)
	cancelNoCause(nil)
	caller, cancelCaller := context.WithTimeout(ctx, 0)
	defer cancelCaller()
	callerReady, cancelCallerReady := context.WithTimeout(caller, time.Hour)
	defer cancelCallerReady()
	live, cancelLive := context.WithTimeout(ctx, time.Hour)
	defer cancelLive()
	for name, c := range map[string]struct{ ctx, ready context.Context }{
		"ready cancelled, not expired":   {ctx, gone},
		"ready cancelled without cause":  {ctx, goneNoCause},
		"caller's deadline, not ready's": {caller, callerReady},
		"still waiting":                  {ctx, live},
	} {
		buf.Reset()
		ReportStall(c.ctx, c.ready, log, "abc123", m, symbol)
		if buf.Len() != 0 {
			t.Errorf("%s: logged %q", name, buf.String())
		}
	}
}
