package imagebuild

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/moby/moby/api/types/registry"
)

// registryAuthError words a registry's 401 as dockerd 20.10 does: "no
// basic auth credentials" when the client sent none (for a pull, after
// the manifest request as dockerd names it), else "unauthorized:
// authentication required". Neither carries errdefs' unauthorized class:
// dockerd answers them with 500, and a 401 would make the docker CLI
// prompt for a login instead of failing. ok is false for any other error.
func registryAuthError(err error, auth *registry.AuthConfig, manifestURL string) (_ error, ok bool) {
	var terr *transport.Error
	if !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
		return err, false
	}
	if !anonymous(auth) {
		return errors.New("unauthorized: authentication required"), true
	}
	if manifestURL != "" {
		return fmt.Errorf("Head %q: no basic auth credentials", manifestURL), true
	}
	return errors.New("no basic auth credentials"), true
}

// anonymous reports whether auth carries no credentials at all.
func anonymous(a *registry.AuthConfig) bool {
	return a == nil || (a.Username == "" && a.Password == "" && a.Auth == "" && a.IdentityToken == "" && a.RegistryToken == "")
}

// manifestURL is where a pull asks for ref's manifest.
func manifestURL(ref name.Reference) string {
	reg := ref.Context().Registry
	return fmt.Sprintf("%s://%s/v2/%s/manifests/%s", reg.Scheme(), reg.RegistryStr(), ref.Context().RepositoryStr(), ref.Identifier())
}
