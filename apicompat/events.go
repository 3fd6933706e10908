package apicompat

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/events"

	huskevents "github.com/husk-vm/husk/runtime/events"
)

// Events is the daemon's event history and live stream.
type Events interface {
	// Subscribe returns the kept events between since and until (none when
	// both are zero) and the live stream after them; cancel ends it.
	Subscribe(since, until time.Time) (past []events.Message, live <-chan events.Message, cancel func())
}

// eventMessage is an event as dockerd writes it for API versions before
// 1.52: the 1.22-era status, id and from fields repeated for container and
// image events.
type eventMessage struct {
	Status string `json:"status,omitempty"`
	ID     string `json:"id,omitempty"`
	From   string `json:"from,omitempty"`
	events.Message
}

func wireEvent(ctx context.Context, m events.Message) any {
	if !versionLess(apiVersion(ctx), "1.52") {
		return m
	}
	out := eventMessage{Message: m}
	switch m.Type {
	case events.ContainerEventType:
		out.Status, out.ID, out.From = string(m.Action), m.Actor.ID, m.Actor.Attributes["image"]
	case events.ImageEventType:
		out.Status, out.ID = string(m.Action), m.Actor.ID
	}
	return out
}

// getEvents is GET /events: past events for since/until, then live ones
// until until or the client goes away.
func (s *server) getEvents(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if s.cfg.Events == nil {
		return errdefs.ErrNotImplemented.WithMessage("events are not available")
	}
	if err := parseForm(r); err != nil {
		return err
	}
	since, err := parseUnixTimestamp(r.Form.Get("since"))
	if err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	until, err := parseUnixTimestamp(r.Form.Get("until"))
	if err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	var (
		deadline <-chan time.Time
		pastOnly bool
	)
	if !until.IsZero() {
		if until.Before(since) {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("`since` time (%s) cannot be after `until` time (%s)", r.Form.Get("since"), r.Form.Get("until")))
		}
		now := time.Now()
		pastOnly = until.Before(now)
		if !pastOnly {
			t := time.NewTimer(until.Sub(now))
			defer t.Stop()
			deadline = t.C
		}
	}
	args, err := parseFilters(r)
	if err != nil {
		return err
	}
	filter := huskevents.NewFilter(args)

	past, live, cancel := s.cfg.Events.Subscribe(since, until)
	defer cancel()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flush(w)
	send := func(m events.Message) error {
		if !filter.Match(m) {
			return nil
		}
		if err := encodeJSON(w, wireEvent(ctx, m)); err != nil {
			return err
		}
		flush(w)
		return nil
	}
	for _, m := range past {
		if err := send(m); err != nil {
			return err
		}
	}
	if pastOnly {
		return nil
	}
	for {
		select {
		case m, ok := <-live:
			if !ok {
				return nil
			}
			if err := send(m); err != nil {
				return err
			}
		case <-deadline:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// restarter is a backend with a restart of its own (which reports it as
// an event); others are stopped and started.
type restarter interface {
	Restart(ctx context.Context, ref, signal string, timeout *int) error
}
