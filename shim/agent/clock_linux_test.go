package agent_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/husk-vm/husk/shim/agent"
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

// slowReseed is a Refresher whose reseed waits to be released.
type slowReseed struct {
	fakeRefresher
	release chan struct{}
	err     error
}

func (s *slowReseed) Reseed(b []byte) error {
	<-s.release
	if s.err != nil {
		return s.err
	}
	return s.fakeRefresher.Reseed(b)
}

// A refresh answers before its reseed ends, and a process starts only
// after it, or not at all when it failed.
func TestReseedBeforeStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		wantErr string
	}{
		{"reseeded", nil, ""},
		{"failed", errors.New("reseed rng: no"), "start: reseed rng: no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &slowReseed{release: make(chan struct{}), err: tc.err}
			c := serveAgent(t, agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(makeRoot(t)), StateDir: t.TempDir(), Refresher: r})
			if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky"}); err != nil {
				t.Fatal(err)
			}
			entropy := bytes.Repeat([]byte{9}, 32)
			if err := c.Refresh(ctx(t), proto.RefreshSpec{Entropy: entropy}); err != nil {
				t.Fatalf("refresh with its reseed held: %v", err)
			}
			started := make(chan error, 1)
			go func() {
				p, err := c.Start(ctx(t), "p", proto.ProcessSpec{Args: []string{"sh", "-c", "exit 0"}})
				if err == nil {
					_, err = p.Wait(ctx(t))
				}
				started <- err
			}()
			select {
			case err := <-started:
				t.Fatalf("a process started before the reseed ended (%v)", err)
			case <-time.After(200 * time.Millisecond):
			}
			close(r.release)
			err := <-started
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("start after the reseed: %v", err)
				}
				r.mu.Lock()
				defer r.mu.Unlock()
				if !bytes.Equal(r.entropy, entropy) {
					t.Errorf("reseeded with %x, want %x", r.entropy, entropy)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("start after a failed reseed: %v, want %q", err, tc.wantErr)
			}
		})
	}
}
