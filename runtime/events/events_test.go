package events

import (
	"testing"
	"time"

	"github.com/moby/moby/api/types/events"
)

// clock hands out one second per event so that since/until can be asserted
// without depending on the wall clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { c.t = c.t.Add(time.Second); return c.t }

func newTestBus(history int) (*Bus, *clock) {
	c := &clock{t: time.Unix(1000, 0)}
	b := New(history)
	b.now = c.now
	return b, c
}

func actions(ms []events.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Action))
	}
	return out
}

func TestReplayAndLive(t *testing.T) {
	b, _ := newTestBus(3)
	for _, a := range []events.Action{"a", "b", "c", "d"} { // at 1001..1004
		b.Publish(events.ContainerEventType, a, "id", map[string]string{"name": "x"})
	}
	for _, tt := range []struct {
		name         string
		since, until time.Time
		want         []string
	}{
		{"no bounds: no history", time.Time{}, time.Time{}, nil},
		{"since keeps the ring's last three", time.Unix(1, 0), time.Time{}, []string{"b", "c", "d"}},
		{"since inclusive", time.Unix(1003, 0), time.Time{}, []string{"c", "d"}},
		{"until inclusive", time.Time{}, time.Unix(1003, 0), []string{"b", "c"}},
		{"both", time.Unix(1003, 0), time.Unix(1003, 0), []string{"c"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			past, live, cancel := b.Subscribe(tt.since, tt.until)
			defer cancel()
			if got := actions(past); !equal(got, tt.want) {
				t.Errorf("past = %v, want %v", got, tt.want)
			}
			if len(live) != 0 {
				t.Errorf("live has %d events before any publish", len(live))
			}
		})
	}

	past, live, cancel := b.Subscribe(time.Unix(1004, 0), time.Time{})
	b.Publish(events.ImageEventType, "pull", "busybox:latest", nil)
	got := <-live
	if len(past) != 1 || got.Action != "pull" || got.Type != events.ImageEventType || got.Scope != "local" ||
		got.Time != 1005 || got.TimeNano != 1005*int64(time.Second) || got.Actor.Attributes == nil {
		t.Errorf("past %v, live %+v", actions(past), got)
	}
	cancel()
	if _, ok := <-live; ok {
		t.Error("live still open after cancel")
	}
	cancel() // a second cancel is harmless
}

func TestPublishCopiesAttributes(t *testing.T) {
	b, _ := newTestBus(0)
	attrs := map[string]string{"name": "x"}
	_, live, cancel := b.Subscribe(time.Time{}, time.Time{})
	defer cancel()
	b.Publish(events.ContainerEventType, "start", "id", attrs)
	attrs["name"] = "changed"
	if m := <-live; m.Actor.Attributes["name"] != "x" {
		t.Errorf("attributes alias the publisher's map: %v", m.Actor.Attributes)
	}
}

func TestSlowSubscriberIsCutOff(t *testing.T) {
	b, _ := newTestBus(0)
	_, live, cancel := b.Subscribe(time.Time{}, time.Time{})
	defer cancel()
	for range subscriberBuffer + 1 {
		b.Publish(events.ContainerEventType, "start", "id", nil)
	}
	n := 0
	for range live {
		n++
	}
	if n != subscriberBuffer {
		t.Errorf("received %d events before the cut-off, want %d", n, subscriberBuffer)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFilter(t *testing.T) {
	ctr := events.Message{Type: events.ContainerEventType, Action: "start", Scope: "local",
		Actor: events.Actor{ID: "abcdef123456", Attributes: map[string]string{"name": "web", "image": "localhost:5000/busybox:latest", "tier": "front"}}}
	execStart := ctr
	execStart.Action = "exec_start: sh -c true"
	img := events.Message{Type: events.ImageEventType, Action: "tag", Scope: "local",
		Actor: events.Actor{ID: "sha256:1234", Attributes: map[string]string{"name": "busybox:v2"}}}
	for _, tt := range []struct {
		args map[string][]string
		msg  events.Message
		want bool
	}{
		{nil, ctr, true},
		{map[string][]string{"type": {"container"}}, ctr, true},
		{map[string][]string{"type": {"image"}}, ctr, false},
		{map[string][]string{"type": {"image", "container"}}, ctr, true},
		{map[string][]string{"event": {"start"}}, ctr, true},
		{map[string][]string{"event": {"stop"}}, ctr, false},
		{map[string][]string{"event": {"exec_start"}}, execStart, true},
		{map[string][]string{"event": {"exec_st"}}, execStart, false},
		{map[string][]string{"container": {"web"}}, ctr, true},
		{map[string][]string{"container": {"abcdef"}}, ctr, true},
		{map[string][]string{"container": {"db"}}, ctr, false},
		{map[string][]string{"container": {"web"}}, img, false},
		{map[string][]string{"image": {"localhost:5000/busybox"}}, ctr, true},
		{map[string][]string{"image": {"localhost:5000/busybox:latest"}}, ctr, true},
		{map[string][]string{"image": {"localhost"}}, ctr, false},
		{map[string][]string{"image": {"busybox"}}, img, true},
		{map[string][]string{"image": {"sha256:1234"}}, img, true},
		{map[string][]string{"image": {"sha256"}}, img, false},
		{map[string][]string{"label": {"tier"}}, ctr, true},
		{map[string][]string{"label": {"tier=front"}}, ctr, true},
		{map[string][]string{"label": {"tier=back"}}, ctr, false},
		{map[string][]string{"label": {"tier", "missing"}}, ctr, false},
		{map[string][]string{"scope": {"swarm"}}, ctr, false},
		{map[string][]string{"colour": {"red"}}, ctr, true},
		{map[string][]string{"type": {"container"}, "event": {"start"}, "container": {"web"}}, ctr, true},
		{map[string][]string{"type": {"container"}, "event": {"die"}, "container": {"web"}}, ctr, false},
	} {
		if got := NewFilter(tt.args).Match(tt.msg); got != tt.want {
			t.Errorf("%v matches %s %s = %v, want %v", tt.args, tt.msg.Type, tt.msg.Action, got, tt.want)
		}
	}
}

func TestStripTag(t *testing.T) {
	for in, want := range map[string]string{
		"busybox": "busybox", "busybox:1": "busybox", "localhost:5000/b": "localhost:5000/b",
		"localhost:5000/b:1": "localhost:5000/b", "b@sha256:00": "b@sha256:00", "sha256:00": "sha256:00",
	} {
		if got := stripTag(in); got != want {
			t.Errorf("stripTag(%q) = %q, want %q", in, got, want)
		}
	}
}
