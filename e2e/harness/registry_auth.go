package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
)

// StartAuthRegistry starts a registry like StartRegistry's that demands
// HTTP basic auth checked against htpasswd (bcrypt "user:hash" lines, as
// docker-registry's htpasswd auth reads them).
func StartAuthRegistry(ctx context.Context, ns *Netns, dir string, htpasswd []byte) (*Registry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create registry dir: %w", err)
	}
	path := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(path, htpasswd, 0o644); err != nil {
		return nil, fmt.Errorf("write htpasswd: %w", err)
	}
	auth := fmt.Sprintf(`auth:
  htpasswd:
    realm: husk-e2e
    path: %s
`, path)
	return startRegistry(ctx, ns, dir, auth, http.StatusUnauthorized)
}
