package agent

import (
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// Refresher applies proto.OpRefresh to the machine.
type Refresher interface {
	SetClock(t time.Time) error
	Reseed(entropy []byte) error
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
func (a *Agent) refresh(spec *proto.RefreshSpec) error {
	if spec == nil {
		return &agentError{proto.KindInvalid, "refresh: missing spec"}
	}
	r := a.opts.Refresher
	if r == nil {
		return &agentError{proto.KindInvalid, "refresh: this agent does not manage the machine's clock and RNG"}
	}
	if spec.TimeUnixNano > 0 {
		if err := r.SetClock(time.Unix(0, spec.TimeUnixNano)); err != nil {
			return err
		}
	}
	if len(spec.Entropy) > 0 {
		if err := r.Reseed(spec.Entropy); err != nil {
			return err
		}
	}
	a.log.Info("refreshed after restore", "clock", spec.TimeUnixNano > 0, "entropy_bytes", len(spec.Entropy))
	return nil
}
