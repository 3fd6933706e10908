package apicompat

import (
	"context"
	"net/http"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/registry"
)

// RegistryAuthenticator is implemented by an Images backend that can
// check credentials against a registry (POST /auth, `docker login`). It
// answers dockerd's status line ("Login Succeeded") and an identity token
// when the registry issued one.
type RegistryAuthenticator interface {
	Login(ctx context.Context, cfg registry.AuthConfig) (status, identityToken string, err error)
}

func (s *server) postAuth(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	a, ok := s.cfg.Images.(RegistryAuthenticator)
	if !ok {
		return errdefs.ErrNotImplemented.WithMessage("this daemon cannot log in to registries")
	}
	var cfg registry.AuthConfig
	if err := readJSON(r, &cfg); err != nil {
		return err
	}
	status, token, err := a.Login(ctx, cfg)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, registry.AuthResponse{Status: status, IdentityToken: token})
}
