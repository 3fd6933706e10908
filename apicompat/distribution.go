package apicompat

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/registry"
)

// DistributionInspector is implemented by an Images backend that can
// look an image up in its registry without pulling it (GET
// /distribution/{name}/json). ref is a normalised name, with a tag or a
// digest or neither.
type DistributionInspector interface {
	Distribution(ctx context.Context, ref string, auth *registry.AuthConfig) (registry.DistributionInspect, error)
}

func (s *server) inspectDistribution(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	d, ok := s.cfg.Images.(DistributionInspector)
	if !ok {
		return errdefs.ErrNotImplemented.WithMessage("this daemon cannot inspect registries")
	}
	if err := parseForm(r); err != nil {
		return err
	}
	ref, err := reference.ParseAnyReference(vars["name"])
	if err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	named, ok := ref.(reference.Named)
	if !ok {
		if _, ok := ref.(reference.Digested); ok {
			// An image ID names nothing in a registry; dockerd says so as
			// an unclassified error.
			return errors.New("no manifest found for full image ID")
		}
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("unknown image reference format: %s", vars["name"]))
	}
	// Credentials are optional here: dockerd ignores ones it cannot decode.
	auth, _ := authconfig.Decode(r.Header.Get(registry.AuthHeader))
	res, err := d.Distribution(ctx, named.String(), auth)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}
