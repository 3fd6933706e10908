package host

import (
	"context"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// clockProbes is how many readings SyncClock takes of the guest's clock;
// it trusts the one with the shortest round trip, as NTP does, because a
// reading is off by at most half its round trip.
const clockProbes = 3

// ClockSync is what SyncClock found and did.
type ClockSync struct {
	// Offset is the guest's wall clock less the host's, before any shift.
	Offset time.Duration
	// Uncertainty bounds the error of Offset: half the best reading's
	// round trip.
	Uncertainty time.Duration
	// Shifted says the guest's clock was moved by -Offset, because the
	// offset was larger than the uncertainty.
	Shifted bool
}

// SyncClock reads the guest's wall clock a few times (proto.OpClock),
// takes the guest's reading to have been made halfway through its round
// trip, and shifts the guest's clock by the offset found when that is
// more than the reading can be wrong by. OpRefresh sets the guest's clock
// to the host's time when the request left, so a guest whose first
// request is slow to arrive lags by that long.
func (c *Client) SyncClock(ctx context.Context) (ClockSync, error) {
	var best ClockSync
	for i := range clockProbes {
		sent := time.Now()
		resp, err := c.simple(ctx, proto.Request{Op: proto.OpClock})
		if err != nil {
			return ClockSync{}, err
		}
		half := time.Since(sent) / 2
		// The wall reading's midpoint; time.Since used the monotonic clock.
		mid := sent.UnixNano() + int64(half)
		if i == 0 || half < best.Uncertainty {
			best = ClockSync{Offset: time.Duration(resp.TimeUnixNano - mid), Uncertainty: half}
		}
	}
	if best.Offset.Abs() <= best.Uncertainty {
		return best, nil
	}
	if _, err := c.simple(ctx, proto.Request{Op: proto.OpClock, Clock: &proto.ClockSpec{ShiftNano: int64(-best.Offset)}}); err != nil {
		return best, err
	}
	best.Shifted = true
	return best, nil
}
