package apicompat

import (
	"context"
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/volume"
)

// Volumes is what the API needs of the volume store.
type Volumes interface {
	Create(ctx context.Context, req volume.CreateRequest) (volume.Volume, error)
	List(ctx context.Context, filters map[string][]string) (volume.ListResponse, error)
	Inspect(ctx context.Context, name string) (volume.Volume, error)
	// Remove refuses a volume in use, even with force; force makes a
	// missing volume no error.
	Remove(ctx context.Context, name string, force bool) error
	// Prune removes unused anonymous volumes, and named ones too when the
	// filter all=true is given.
	Prune(ctx context.Context, filters map[string][]string) (volume.PruneReport, error)
}

// initVolumeRoutes registers /volumes, literal paths before "{name}".
func (s *server) initVolumeRoutes() {
	s.handle(http.MethodGet, "/volumes", s.listVolumes)
	s.handle(http.MethodGet, "/volumes/{name}", s.inspectVolume)
	s.handle(http.MethodPost, "/volumes/create", outlives(s.createVolume))
	s.handle(http.MethodPost, "/volumes/prune", s.pruneVolumes)
	s.handle(http.MethodDelete, "/volumes/{name}", outlives(s.removeVolume))
}

func (s *server) volumes() (Volumes, error) {
	if s.cfg.Volumes == nil {
		return nil, errdefs.ErrNotImplemented.WithMessage("this daemon has no volumes")
	}
	return s.cfg.Volumes, nil
}

func (s *server) listVolumes(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	v, err := s.volumes()
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	filters, err := parseFilters(r)
	if err != nil {
		return fmt.Errorf("error reading volume filters: %w", err)
	}
	list, err := v.List(ctx, filters)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, list)
}

func (s *server) inspectVolume(ctx context.Context, w http.ResponseWriter, _ *http.Request, vars map[string]string) error {
	v, err := s.volumes()
	if err != nil {
		return err
	}
	vol, err := v.Inspect(ctx, vars["name"])
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, vol)
}

func (s *server) createVolume(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	v, err := s.volumes()
	if err != nil {
		return err
	}
	var req volume.CreateRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	if req.ClusterVolumeSpec != nil {
		return errdefs.ErrNotImplemented.WithMessage("cluster volumes are not supported")
	}
	vol, err := v.Create(ctx, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, vol)
}

func (s *server) pruneVolumes(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	v, err := s.volumes()
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	filters, err := parseFilters(r)
	if err != nil {
		return err
	}
	// Before API 1.42 prune took named volumes too.
	if versionLess(apiVersion(ctx), "1.42") && len(filters["all"]) == 0 {
		if filters == nil {
			filters = map[string][]string{}
		}
		filters["all"] = []string{"true"}
	}
	report, err := v.Prune(ctx, filters)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, report)
}

func (s *server) removeVolume(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	v, err := s.volumes()
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	if err := v.Remove(ctx, vars["name"], boolValue(r, "force")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
