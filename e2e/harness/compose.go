package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ComposeModule and ComposeVersion name the Docker Compose v2 build the
// suite uses as a CLI plugin. v2.40.3 is a release whose whole dependency
// graph the Go module proxy serves.
const (
	ComposeModule  = "github.com/docker/compose/v2"
	ComposeVersion = "v2.40.3"
)

// BuildCompose builds Docker Compose from its Go module into out (the
// docker-compose CLI plugin), unless out already exists. It goes through a
// throwaway main module: compose's own go.mod has exclude directives, which
// `go install pkg@version` refuses.
func BuildCompose(ctx context.Context, out string) error {
	if _, err := os.Stat(out); err == nil {
		return nil
	}
	work, err := os.MkdirTemp("", "husk-compose-build-")
	if err != nil {
		return fmt.Errorf("build compose: %w", err)
	}
	defer os.RemoveAll(work)
	steps := [][]string{
		{"go", "mod", "init", "huskcomposebuild"},
		{"go", "get", ComposeModule + "/cmd@" + ComposeVersion},
		{"go", "build", "-trimpath", "-o", out + ".tmp", ComposeModule + "/cmd"},
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("build compose: %w", err)
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, s[0], s[1:]...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
		if b, err := cmd.CombinedOutput(); err != nil {
			os.Remove(out + ".tmp")
			return fmt.Errorf("build compose: %s: %w\n%s", s, err, b)
		}
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return fmt.Errorf("build compose: %w", err)
	}
	return nil
}
