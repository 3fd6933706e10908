// Package events is the daemon's event bus: the runtime and the image
// service publish what happens to containers, images, networks and volumes,
// and GET /events subscribers receive it, live and (for --since) from a
// bounded in-memory history, as dockerd's daemon/events does.
//
// It is hand-rolled rather than built on a pub/sub library because the
// semantics that matter are dockerd's: a subscription must see the history
// and then the live stream with nothing lost or repeated in between, and a
// slow subscriber must never hold up a publisher (the runtime publishes
// while holding its container locks).
package events

import (
	"maps"
	"sync"
	"time"

	"github.com/moby/moby/api/types/events"
)

// DefaultHistory is how many past events a Bus keeps for replay; dockerd
// keeps 256.
const DefaultHistory = 256

// subscriberBuffer is how many events a subscriber may fall behind before it
// is cut off.
const subscriberBuffer = 1024

// Bus fans events out to subscribers and keeps the latest ones for replay.
type Bus struct {
	now func() time.Time

	mu      sync.Mutex
	history []events.Message // ring of at most max entries, oldest at start
	start   int
	max     int
	subs    map[*subscriber]struct{}
}

// New returns a Bus that keeps the last history events (DefaultHistory
// when history <= 0).
func New(history int) *Bus {
	if history <= 0 {
		history = DefaultHistory
	}
	return &Bus{now: time.Now, max: history, subs: map[*subscriber]struct{}{}}
}

// Publish records an event of typ about the actor id. attrs is copied;
// Publish never blocks.
func (b *Bus) Publish(typ events.Type, action events.Action, id string, attrs map[string]string) {
	now := b.now().UTC()
	msg := events.Message{
		Type: typ, Action: action, Scope: "local",
		Actor: events.Actor{ID: id, Attributes: maps.Clone(attrs)},
		Time:  now.Unix(), TimeNano: now.UnixNano(),
	}
	if msg.Actor.Attributes == nil {
		msg.Actor.Attributes = map[string]string{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.history) < b.max {
		b.history = append(b.history, msg)
	} else {
		b.history[b.start] = msg
		b.start = (b.start + 1) % b.max
	}
	for s := range b.subs {
		select {
		case s.ch <- msg:
		default:
			// Too far behind: end its stream rather than hold up the
			// daemon or silently skip events.
			delete(b.subs, s)
			close(s.ch)
		}
	}
}

type subscriber struct {
	ch chan events.Message
}

// Subscribe returns the kept events from since to until (all kept ones
// for a zero bound, none when both are zero, as dockerd replays) and a
// stream of every later event; the two meet exactly. live is closed by
// cancel, or when the subscriber fell too far behind.
func (b *Bus) Subscribe(since, until time.Time) (past []events.Message, live <-chan events.Message, cancel func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !since.IsZero() || !until.IsZero() {
		for i := range len(b.history) {
			m := b.history[(b.start+i)%len(b.history)]
			if (since.IsZero() || m.TimeNano >= since.UnixNano()) && (until.IsZero() || m.TimeNano <= until.UnixNano()) {
				past = append(past, m)
			}
		}
	}
	s := &subscriber{ch: make(chan events.Message, subscriberBuffer)}
	b.subs[s] = struct{}{}
	return past, s.ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.subs[s]; ok {
			delete(b.subs, s)
			close(s.ch)
		}
	}
}
