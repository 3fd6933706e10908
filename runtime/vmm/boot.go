package vmm

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/husk-vm/husk/kernel"
)

// Boot is a booting guest that AwaitBoot waits for.
type Boot struct {
	// ID names the VM in the log.
	ID      string
	Machine Machine
	// Console is the guest's serial console log, watched for the kernel's
	// soft-lockup reports.
	Console string
	// Deadline ends the wait, however many times the guest was helped.
	Deadline time.Time
	// Retranslate lets a guest that locks up have its code translated
	// afresh (false under KVM, where the guest's code is not translated).
	Retranslate bool
	// Symbol and Backends go into the report of a guest that does not
	// answer (ReportStall).
	Symbol   func(pc uint64) string
	Backends []int
}

// retranslator is a VM whose VMM can translate afresh the guest code its
// vCPUs run (qemu.Machine under TCG).
type retranslator interface {
	Retranslate(ctx context.Context) (int, error)
}

// AwaitBoot has connect open a session with b's agent until b.Deadline,
// or until the guest's kernel reports a soft lockup on its console, which
// it then returns as a *kernel.LockupError. A wait that fails for either
// reason is reported first (ReportStall).
//
// On a lockup, where b allows and its VMM can, the code the guest's vCPUs
// run is translated afresh and the wait goes on, until the deadline or
// the next lockup the console reports. A stress rig's boot that hung spun
// where its kernel had patched its code, and QEMU 7.2 can keep running a
// translation of code that was changed while it was being translated
// (qemu.Machine.Retranslate): such a guest goes on with its boot once the
// translation is dropped, where a boot again would cost the boot's time
// once more. A guest that spins for another reason spins on, and its
// watchdog says so again ~20 s later; what to do then is the caller's.
func AwaitBoot[T any](ctx context.Context, log *slog.Logger, b Boot, connect func(context.Context) (T, error)) (T, error) {
	c, err := awaitFrom(ctx, log, b, connect, 0)
	var lockup *kernel.LockupError
	if !errors.As(err, &lockup) {
		return c, err
	}
	r, ok := b.Machine.(retranslator)
	if !ok || !b.Retranslate || ctx.Err() != nil {
		return c, err
	}
	n, rerr := r.Retranslate(ctx)
	if rerr != nil {
		log.Warn("guest kernel locked up while booting; its code could not be translated afresh", "id", b.ID, "console", lockup.Line, "err", rerr)
		return c, err
	}
	log.Warn("guest kernel locked up while booting; its code was translated afresh", "id", b.ID, "console", lockup.Line, "addresses", n)
	c, err = awaitFrom(ctx, log, b, connect, kernel.ConsoleLength(b.Console))
	if err == nil {
		log.Info("guest booted on once its code was translated afresh", "id", b.ID)
	}
	return c, err
}

// awaitFrom is one wait of AwaitBoot's, watching the console past offset
// from.
func awaitFrom[T any](ctx context.Context, log *slog.Logger, b Boot, connect func(context.Context) (T, error), from int64) (T, error) {
	readyCtx, cancel := context.WithDeadline(ctx, b.Deadline)
	defer cancel()
	readyCtx, stopWatch := kernel.WatchBootFrom(readyCtx, b.Console, from)
	defer stopWatch()
	c, err := connect(readyCtx)
	if err != nil {
		ReportStall(ctx, readyCtx, log, b.ID, b.Machine, b.Symbol, b.Backends...)
		if lockup := kernel.LockedUp(readyCtx); lockup != nil {
			return c, lockup
		}
	}
	return c, err
}
