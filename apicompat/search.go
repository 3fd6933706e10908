package apicompat

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/registry"
)

// RegistrySearcher is implemented by an Images backend that can search a
// registry's index (GET /images/search, `docker search`). limit 0 means
// the index's default; headers are the client's to pass on.
type RegistrySearcher interface {
	Search(ctx context.Context, term string, limit int, filters map[string][]string, auth *registry.AuthConfig, headers http.Header) ([]registry.SearchResult, error)
}

func (s *server) searchImages(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	searcher, ok := s.cfg.Images.(RegistrySearcher)
	if !ok {
		return errdefs.ErrNotImplemented.WithMessage("this daemon cannot search registries")
	}
	if err := parseForm(r); err != nil {
		return err
	}
	var limit int
	if v := r.Form.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid limit specified: %v", err))
		}
		if n < 0 {
			return errdefs.ErrInvalidArgument.WithMessage("invalid limit specified")
		}
		limit = n
	}
	filters, err := parseFilters(r)
	if err != nil {
		return err
	}
	// A search needs no credentials: dockerd ignores ones it cannot decode.
	auth, _ := authconfig.Decode(r.Header.Get(registry.AuthHeader))
	headers := http.Header{}
	for k, vs := range r.Header {
		if k = http.CanonicalHeaderKey(k); strings.HasPrefix(k, "X-Meta-") {
			headers[k] = vs
		}
	}
	results, err := searcher.Search(ctx, r.Form.Get("term"), limit, filters, auth, headers)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, results)
}
