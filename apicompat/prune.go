package apicompat

import (
	"context"
	"net/http"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/image"
)

// ImagePruner is implemented by an Images backend that can prune
// (POST /images/prune); others answer 501.
type ImagePruner interface {
	Prune(ctx context.Context, filters map[string][]string) (image.PruneReport, error)
}

func (s *server) pruneImages(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	p, ok := s.cfg.Images.(ImagePruner)
	if !ok {
		return errdefs.ErrNotImplemented.WithMessage("this daemon cannot prune images")
	}
	if err := parseForm(r); err != nil {
		return err
	}
	filters, err := parseFilters(r)
	if err != nil {
		return err
	}
	report, err := p.Prune(ctx, filters)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, report)
}
