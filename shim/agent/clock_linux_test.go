package agent_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// guestClock is a Refresher whose wall clock runs off the host's by
// offset. Setting it lands late by lag, as a refresh does that takes lag
// to reach a slow guest.
type guestClock struct {
	fakeRefresher
	mu     sync.Mutex
	offset time.Duration
	lag    time.Duration
	shifts []time.Duration
}

func (g *guestClock) SetClock(t time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offset = t.Sub(time.Now()) - g.lag
	return nil
}

func (g *guestClock) Now() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return time.Now().Add(g.offset)
}

func (g *guestClock) ShiftClock(d time.Duration) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offset += d
	g.shifts = append(g.shifts, d)
	return nil
}

func (g *guestClock) state() (time.Duration, []time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.offset, append([]time.Duration(nil), g.shifts...)
}

// SyncClock's figures hold whatever the round trips take: the guest reads
// its clock between the host's send and receive, so the offset it finds
// is off by at most half the round trip, and so is the clock it leaves.
func TestSyncClock(t *testing.T) {
	for _, tc := range []struct {
		name        string
		offset      time.Duration
		wantShifted bool
	}{
		{"behind", -150 * time.Millisecond, true},
		{"ahead", 2 * time.Second, true},
		{"right", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &guestClock{offset: tc.offset}
			got, err := refreshClient(t, g).SyncClock(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if (got.Offset - tc.offset).Abs() > got.Uncertainty {
				t.Errorf("found an offset of %v ± %v, but it was %v", got.Offset, got.Uncertainty, tc.offset)
			}
			after, shifts := g.state()
			if got.Shifted != tc.wantShifted || len(shifts) != map[bool]int{false: 0, true: 1}[tc.wantShifted] {
				t.Fatalf("shifted %v with shifts %v, want shifted %v", got.Shifted, shifts, tc.wantShifted)
			}
			if after.Abs() > got.Uncertainty {
				t.Errorf("guest clock left %v off, more than the %v uncertainty", after, got.Uncertainty)
			}
		})
	}
}

func TestSyncClockWithoutShifter(t *testing.T) {
	_, err := refreshClient(t, &fakeRefresher{}).SyncClock(ctx(t))
	var ae *host.AgentError
	if !errors.As(err, &ae) || ae.Kind != proto.KindInvalid {
		t.Errorf("sync without a clock shifter: %v, want an invalid-request agent error", err)
	}
}

// Freshen leaves the guest behind by the refresh's delivery, then makes
// up for it on its own.
func TestFreshenSyncsClock(t *testing.T) {
	g := &guestClock{lag: 300 * time.Millisecond}
	if err := refreshClient(t, g).Freshen(ctx(t), nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		after, shifts := g.state()
		if len(shifts) > 0 {
			if shifts[0] < 200*time.Millisecond || after.Abs() > 100*time.Millisecond {
				t.Errorf("shifts %v left the guest %v off after a refresh 300ms late", shifts, after)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no clock shift after the refresh; guest %v off", after)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
