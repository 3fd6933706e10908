package apicompat

import (
	"context"
	"net/http"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
)

// ContainerStats samples a container's resource usage. The response names
// the container even with an error; errdefs.ErrConflict means it is not
// running, errdefs.ErrUnavailable that it is paused (no fresh sample).
type ContainerStats interface {
	Stats(ctx context.Context, ref string) (container.StatsResponse, error)
}

// defaultStatsInterval is dockerd's stats collector period.
const defaultStatsInterval = time.Second

// getStats is GET /containers/{name}/stats. As in dockerd: streamed, one
// sample per interval, each carrying the previous one's CPU counters
// (precpu_stats) for the client's percentage; with stream=false, the
// second sample, so that the percentage can be computed; with one-shot,
// the first; for a container that is not running and no stream, an empty
// sample that only names it.
func (s *server) getStats(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if s.cfg.Stats == nil {
		return errdefs.ErrNotImplemented.WithMessage("stats are not available")
	}
	if err := parseForm(r); err != nil {
		return err
	}
	stream := boolValueOrDefault(r, "stream", true)
	oneShot := !stream && boolValue(r, "one-shot")
	name := vars["name"]

	first, err := s.cfg.Stats.Stats(ctx, name)
	switch {
	case errdefs.IsNotFound(err):
		return err
	case err != nil && !stream:
		if errdefs.IsConflict(err) || errdefs.IsUnavailable(err) {
			return writeJSON(w, http.StatusOK, &container.StatsResponse{ID: first.ID, Name: first.Name})
		}
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flush(w)

	var prev *container.StatsResponse
	if err == nil {
		prev = &first
		if oneShot {
			return encodeJSON(w, &first)
		}
		if stream {
			if err := encodeJSON(w, &first); err != nil {
				return nil
			}
			flush(w)
		}
	}
	tick := time.NewTicker(s.statsInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := s.cfg.Stats.Stats(ctx, name)
		switch {
		case errdefs.IsUnavailable(err) && prev != nil:
			// Paused: nothing moved since the last sample.
			cur = *prev
			cur.Read = time.Now().UTC()
		case errdefs.IsNotFound(err):
			return nil
		case err != nil:
			s.log.Debug("stats sample", "container", name, "err", err)
			continue
		}
		if prev != nil {
			cur.PreCPUStats, cur.PreRead = prev.CPUStats, prev.Read
		}
		if err := encodeJSON(w, &cur); err != nil {
			return nil
		}
		flush(w)
		if !stream {
			return nil
		}
		prev = &cur
	}
}
