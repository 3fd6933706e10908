package containers

import (
	"context"
	"path/filepath"
	"time"

	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/runtime/vmm"
)

// runningLockupInterval is how often a running guest's console is read
// for a soft lockup. Once a second is plenty for a report that comes
// after 20 s of spinning, and cheap beside many containers.
const runningLockupInterval = time.Second

// watchLockups follows a running container's guest console until ctx
// ends, and each time the kernel reports a soft lockup there, logs what
// the VMM shows and has the code its vCPUs run translated afresh
// (retranslated). The kernel patches its code at run time too (a static
// key switched on by a process's first use of some feature), and a
// vCPU caught in a stale translation of it would spin for good with the
// container's work behind it; a restored VM, from a template or a
// checkpoint, runs no boot that the boot's own watch would cover. The
// returned channel closes when the watch has ended. A VM whose VMM
// cannot retranslate is not watched.
func (c *ctr) watchLockups(ctx context.Context, r *run) <-chan struct{} {
	done := make(chan struct{})
	rt, ok := r.machine.(retranslator)
	if !ok || c.m.guest.Accel == "kvm" {
		close(done)
		return done
	}
	log, id := c.m.log, c.rec.ID[:12]
	var backends []int
	if r.shares != nil {
		backends = r.shares.pids()
	}
	console := filepath.Join(c.vmDir(), consoleLog)
	// What the console held before this run is not this run's.
	from := kernel.ConsoleLength(console)
	go func() {
		defer close(done)
		for {
			line, err := kernel.WatchLockup(ctx, console, from, runningLockupInterval)
			if err != nil {
				return
			}
			vmm.Describe(ctx, log, "guest kernel reports a soft lockup; what its VMM shows", id, r.machine, c.m.guest.KernelSymbol, backends...)
			// The retranslation stops and runs the VM, so it must not
			// meet a pause or a checkpoint, which hold c.mu. The run's
			// end may be waiting for this watch with c.mu held by a stop,
			// so the lock is only tried while the run lasts.
			if !c.lockWhile(ctx) {
				return
			}
			if c.run != r || !c.rec.State.Running || c.rec.State.Paused {
				c.mu.Unlock()
				from = kernel.ConsoleLength(console)
				continue
			}
			n, err := rt.Retranslate(ctx)
			c.mu.Unlock()
			if err != nil {
				log.Warn("guest kernel reports a soft lockup; its code could not be translated afresh", "id", id, "console", line, "err", err)
			} else {
				log.Warn("guest kernel reports a soft lockup; its code was translated afresh", "id", id, "console", line, "addresses", n)
			}
			// A guest that spins on says so again ~20 s later.
			from = kernel.ConsoleLength(console)
		}
	}()
	return done
}

// lockWhile takes c.mu unless ctx ends first, and says whether it did.
func (c *ctr) lockWhile(ctx context.Context) bool {
	for !c.mu.TryLock() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}
