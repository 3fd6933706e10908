package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// Refresher applies proto.OpRefresh to the machine.
type Refresher interface {
	SetClock(t time.Time) error
	Reseed(entropy []byte) error
	// Readdress gives the interfaces a restored copy's MACs and addresses.
	Readdress(ctx context.Context, spec *proto.NetworkSpec) error
	// SetHostname sets name in the UTS namespace of process pid.
	SetHostname(pid int, name string) error
}

// GuestRefresher is the Refresher of a real guest: it sets CLOCK_REALTIME
// and feeds /dev/urandom. It needs CAP_SYS_TIME and CAP_SYS_ADMIN, which
// the agent has as the guest's PID 1.
type GuestRefresher struct{}

// SetClock sets the wall clock.
func (GuestRefresher) SetClock(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("set clock: %w", err)
	}
	return nil
}

// ClockShifter is a Refresher that also serves proto.OpClock.
type ClockShifter interface {
	Now() time.Time
	// ShiftClock moves the wall clock by d from wherever it is now.
	ShiftClock(d time.Duration) error
}

// Now reads the wall clock.
func (GuestRefresher) Now() time.Time { return time.Now() }

// ShiftClock steps the wall clock by d (adjtimex's ADJ_SETOFFSET), which,
// unlike setting it, does not depend on when the request was sent. The
// step is given in microseconds: ADJ_NANO would leave STA_NANO set, and
// every later adjtimex in the guest would read nanoseconds where it
// expects microseconds.
func (GuestRefresher) ShiftClock(d time.Duration) error {
	sec, usec := int64(d/time.Second), int64(d%time.Second/time.Microsecond)
	if usec < 0 {
		sec, usec = sec-1, usec+int64(time.Second/time.Microsecond)
	}
	tx := unix.Timex{Modes: unix.ADJ_SETOFFSET, Time: unix.Timeval{Sec: sec, Usec: usec}}
	if _, err := unix.ClockAdjtime(unix.CLOCK_REALTIME, &tx); err != nil {
		return fmt.Errorf("shift clock by %v: %w", d, err)
	}
	return nil
}

// Reseed credits entropy to the kernel's pool (RNDADDENTROPY) and forces
// the CRNG to reseed from it now (RNDRESEEDCRNG) rather than at its next
// scheduled reseed, so numbers drawn right after a restore already differ
// between copies of one snapshot.
func (GuestRefresher) Reseed(entropy []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("reseed rng: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(entropy))
	*(*int32)(unsafe.Pointer(&info[0])) = int32(len(entropy) * 8)
	*(*int32)(unsafe.Pointer(&info[4])) = int32(len(entropy))
	copy(info[8:], entropy)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return fmt.Errorf("reseed rng: add entropy: %w", errno)
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); errno != 0 {
		return fmt.Errorf("reseed rng: %w", errno)
	}
	return nil
}

// refresh serves OpRefresh.
func (a *Agent) refresh(ctx context.Context, spec *proto.RefreshSpec) error {
	if spec == nil {
		return &agentError{proto.KindInvalid, "refresh: missing spec"}
	}
	r := a.opts.Refresher
	if r == nil {
		return &agentError{proto.KindInvalid, "refresh: this agent does not manage the machine's clock and RNG"}
	}
	start := time.Now()
	if spec.TimeUnixNano > 0 {
		if err := r.SetClock(time.Unix(0, spec.TimeUnixNano)); err != nil {
			return err
		}
	}
	clocked := time.Now()
	if len(spec.Entropy) > 0 {
		a.reseedBeside(r, spec.Entropy)
	}
	if id := spec.Identity; id != nil {
		if err := a.takeIdentity(ctx, r, id); err != nil {
			return err
		}
	}
	a.log.Debug("refreshed", "clock", spec.TimeUnixNano > 0, "entropy_bytes", len(spec.Entropy),
		"identity", spec.Identity != nil, "clock_took", clocked.Sub(start), "identity_took", time.Since(clocked))
	return nil
}

// reseedBeside reseeds the RNG in the background. After a restore under
// TCG the reseed is the slowest part of a refresh (15-24 ms, the CRNG's
// hashing translated afresh), and only a process's start must come after
// it, so the refresh answers without waiting and the host's setup runs
// beside it; OpStart waits (awaitReseed). Reseeds run one at a time, in
// the order of their refreshes.
func (a *Agent) reseedBeside(r Refresher, entropy []byte) {
	entropy = slices.Clone(entropy)
	done := make(chan struct{})
	a.mu.Lock()
	prev := a.reseeded
	a.reseeded = done
	a.mu.Unlock()
	go func() {
		if prev != nil {
			<-prev
		}
		start := time.Now()
		err := r.Reseed(entropy)
		if err != nil {
			a.log.Warn("reseed after a refresh", "err", err)
		} else {
			a.log.Debug("reseeded", "took", time.Since(start))
		}
		a.mu.Lock()
		if a.reseeded == done {
			a.reseedErr = err
		}
		a.mu.Unlock()
		close(done)
	}()
}

// awaitReseed waits for the last refresh's reseed, so that no process
// starts drawing the random numbers of every other copy of its snapshot.
func (a *Agent) awaitReseed(ctx context.Context, sessionClosed <-chan struct{}) error {
	for {
		a.mu.Lock()
		done := a.reseeded
		a.mu.Unlock()
		if done == nil {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("wait for the RNG's reseed: %w", ctx.Err())
		case <-sessionClosed:
			return errors.New("the session ended before the RNG's reseed")
		}
		a.mu.Lock()
		latest, err := a.reseeded == done, a.reseedErr
		a.mu.Unlock()
		if latest {
			return err
		}
	}
}

// clock serves OpClock.
func (a *Agent) clock(spec *proto.ClockSpec) (proto.Response, error) {
	c, ok := a.opts.Refresher.(ClockShifter)
	if !ok {
		return proto.Response{}, &agentError{proto.KindInvalid, "clock: this agent does not manage the machine's clock"}
	}
	if spec != nil && spec.ShiftNano != 0 {
		if err := c.ShiftClock(time.Duration(spec.ShiftNano)); err != nil {
			return proto.Response{}, err
		}
	}
	return proto.Response{TimeUnixNano: c.Now().UnixNano()}, nil
}

// takeIdentity makes a restored copy the container the host says it now
// is. The network goes first: the other steps cannot fail in a way that
// would make a half-addressed guest worse.
func (a *Agent) takeIdentity(ctx context.Context, r Refresher, id *proto.IdentitySpec) error {
	if id.Network != nil {
		want := appliedNetwork(id.Network)
		a.mu.Lock()
		same := sameNetwork(a.network, want)
		a.mu.Unlock()
		if !same {
			err := r.Readdress(ctx, id.Network)
			a.mu.Lock()
			a.network = nil
			if err == nil {
				a.network = want
			}
			a.mu.Unlock()
			if err != nil {
				return fmt.Errorf("refresh: %w", err)
			}
		}
	}
	a.mu.Lock()
	etcDir := a.etcDir
	// A copy that keeps its container's hostname leaves its processes'
	// UTS namespaces alone: joining each costs a thread of its own.
	renamed := id.Hostname != "" && id.Hostname != a.hostname
	if id.Hostname != "" {
		a.hostname = id.Hostname
	}
	var pids []int
	for _, p := range a.procs {
		p.mu.Lock()
		if p.ownUTS && p.osProc != nil {
			select {
			case <-p.exited:
			default:
				pids = append(pids, p.osProc.Pid)
			}
		}
		p.mu.Unlock()
	}
	a.mu.Unlock()
	if id.ResolvConf != "" {
		if err := a.redirectDNS(id.DNSServer); err != nil {
			return fmt.Errorf("refresh: %w", err)
		}
	}
	if etcDir != "" {
		files := map[string]string{"hosts": id.Hosts, "resolv.conf": id.ResolvConf}
		if id.Hostname != "" {
			files["hostname"] = id.Hostname + "\n"
		}
		for name, content := range files {
			if content == "" {
				continue
			}
			if err := rewriteInPlace(filepath.Join(etcDir, name), content); err != nil {
				return fmt.Errorf("refresh: %w", err)
			}
		}
	}
	if !renamed {
		return nil
	}
	for _, pid := range pids {
		if err := r.SetHostname(pid, id.Hostname); err != nil {
			return fmt.Errorf("refresh: %w", err)
		}
	}
	return nil
}

// rewriteInPlace replaces a file's contents without replacing the file:
// the container sees it through a bind mount of this very inode, which a
// rename would leave behind.
func rewriteInPlace(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", path, err)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return fmt.Errorf("rewrite %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("rewrite %s: %w", path, err)
	}
	return nil
}

// Readdress implements Refresher: the NICs take the spec's names by PCI
// slot (nameBySlot), then ReaddressNetwork gives them their addresses.
func (GuestRefresher) Readdress(ctx context.Context, spec *proto.NetworkSpec) error {
	if err := nameBySlot(spec); err != nil {
		return err
	}
	return ReaddressNetwork(ctx, spec)
}

// SetHostname joins pid's UTS namespace on a thread of its own, which is
// thrown away afterwards rather than handed back to the Go scheduler in a
// foreign namespace.
func (GuestRefresher) SetHostname(pid int, name string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread ends with this goroutine.
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/uts", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("set hostname of pid %d: %w", pid, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWUTS)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("set hostname of pid %d: join its uts namespace: %w", pid, err)
			return
		}
		if err := unix.Sethostname([]byte(name)); err != nil {
			errc <- fmt.Errorf("set hostname of pid %d: %w", pid, err)
			return
		}
		errc <- nil
	}()
	return <-errc
}
