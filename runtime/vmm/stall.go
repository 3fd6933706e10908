package vmm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
)

// Stall is what a VMM could tell of a guest that stopped answering: a
// boot or restore whose agent never became ready is killed, and this is
// all that is left to say why.
type Stall struct {
	// State is the VMM's run state ("running", "paused", ...); empty when
	// its monitor did not answer.
	State string
	// CPUs are the guest's vCPUs, in order.
	CPUs []StalledCPU
	// Queues are the guest's virtqueues, each with how many buffers the
	// guest has posted and how many the device has given back.
	Queues []string
	// Threads are the VMM process's threads: name, state and what each
	// waits in, for a VMM whose monitor is stuck behind one of them.
	Threads []string
	// Errs is what could not be learnt.
	Errs []error
}

// StalledCPU is where one vCPU was.
type StalledCPU struct {
	// PC is the guest's instruction pointer.
	PC uint64
	// Halted is a vCPU waiting for an interrupt (HLT), which is where an
	// idle guest's vCPUs are.
	Halted bool
	// Code is guest memory at PC, as the guest sees it now. A vCPU that
	// keeps running an instruction other than the one in memory there is
	// running a stale translation of code the guest has since patched.
	Code []byte
}

// stallDescriber is a Machine whose VMM can describe its guest
// (qemu.Machine).
type stallDescriber interface {
	DescribeStall(ctx context.Context) Stall
}

// stallReportTimeout bounds a whole report, so that a VMM that answers
// nothing delays the kill of a VM already given up on by seconds only.
const stallReportTimeout = 10 * time.Second

// ReportStall logs, as a warning, what m's VMM can tell of a guest whose
// agent did not answer before ready's deadline, or before ready was
// cancelled with a cause of its own (a watch that saw the guest's kernel
// report a lockup), while the caller's ctx is live, before the caller
// kills it: a guest that hangs in one boot of hundreds leaves little else
// behind, since guests boot quiet. A wait given up for any other reason
// (the caller's context, ready cancelled without a cause, the VMM's exit,
// the agent's refusal) says why itself, and is not reported. vm names the
// VM in the log, by ID or directory. Drivers that cannot tell log
// nothing. symbol, when not nil, names a guest kernel address ("" for
// none). backends are the processes serving the VM's devices (its
// virtiofsd), whose threads and children's threads are listed too: they
// end with the VMM, so after the kill there is nothing left of them to
// look at.
func ReportStall(ctx, ready context.Context, log *slog.Logger, vm string, m Machine, symbol func(pc uint64) string, backends ...int) {
	if cause := context.Cause(ready); ctx.Err() != nil || cause == nil || errors.Is(cause, context.Canceled) {
		return
	}
	Describe(ctx, log, "guest agent did not answer; what its VMM shows", vm, m, symbol, backends...)
}

// Describe logs, as a warning with message msg, what m's VMM can tell of
// its guest, as ReportStall does, whatever the guest is doing.
func Describe(ctx context.Context, log *slog.Logger, msg, vm string, m Machine, symbol func(pc uint64) string, backends ...int) {
	d, ok := m.(stallDescriber)
	if !ok || log == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stallReportTimeout)
	defer cancel()
	s := d.DescribeStall(ctx)
	attrs := []any{"vm", vm, "vmm_pid", m.PID(), "state", s.State}
	cpus := make([]string, len(s.CPUs))
	for i, c := range s.CPUs {
		cpus[i] = fmt.Sprintf("%d: %#x", i, c.PC)
		if symbol != nil {
			if name := symbol(c.PC); name != "" {
				cpus[i] += " " + name
			}
		}
		if len(c.Code) > 0 {
			cpus[i] += fmt.Sprintf(" [% x]", c.Code)
		}
		if c.Halted {
			cpus[i] += " (halted)"
		}
	}
	attrs = append(attrs, "cpus", strings.Join(cpus, "; "), "queues", strings.Join(s.Queues, "; "),
		"threads", strings.Join(s.Threads, "; "))
	var bs []string
	for queue := slices.Clone(backends); len(queue) > 0; {
		pid := queue[0]
		queue = queue[1:]
		threads, err := vmmproc.Threads(pid)
		if err != nil {
			s.Errs = append(s.Errs, err)
			continue
		}
		bs = append(bs, fmt.Sprintf("pid %d: %s", pid, strings.Join(threads, "; ")))
		if kids, err := vmmproc.Children(pid); err == nil {
			queue = append(queue, kids...)
		}
	}
	if len(bs) > 0 {
		attrs = append(attrs, "backends", strings.Join(bs, " | "))
	}
	if len(s.Errs) > 0 {
		errs := make([]string, len(s.Errs))
		for i, e := range s.Errs {
			errs[i] = e.Error()
		}
		attrs = append(attrs, "unknown", strings.Join(errs, "; "))
	}
	log.Warn(msg, attrs...)
}
