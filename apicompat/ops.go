package apicompat

import (
	"context"
	"net/http"

	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/runtime/containers"
)

// ContainerAdmin is the rest of the container API beyond the lifecycle:
// rename, pause and unpause, top and prune.
type ContainerAdmin interface {
	Rename(ctx context.Context, container, newName string) error
	Pause(ctx context.Context, container string) error
	Unpause(ctx context.Context, container string) error
	Top(ctx context.Context, container, psArgs string) (container.TopResponse, error)
	Prune(ctx context.Context, opts PruneOptions) (container.PruneReport, error)
}

type PruneOptions = containers.PruneOptions

func (s *server) renameContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	if err := s.cfg.Admin.Rename(ctx, vars["name"], r.Form.Get("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) pauseContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := s.cfg.Admin.Pause(ctx, vars["name"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) unpauseContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := s.cfg.Admin.Unpause(ctx, vars["name"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) topContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	resp, err := s.cfg.Admin.Top(ctx, vars["name"], r.Form.Get("ps_args"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (s *server) pruneContainers(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	filters, err := parseFilters(r)
	if err != nil {
		return err
	}
	report, err := s.cfg.Admin.Prune(ctx, PruneOptions{Filters: filters})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, report)
}
