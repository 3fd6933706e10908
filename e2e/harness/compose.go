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

// BuildxModule and BuildxVersion name the buildx build the suite uses as
// a CLI plugin: v0.29.1 is the buildx that compose v2.40.3 embeds.
const (
	BuildxModule  = "github.com/docker/buildx"
	BuildxVersion = "v0.29.1"
)

// BuildCompose builds Docker Compose from its Go module into out (the
// docker-compose CLI plugin), unless out already exists.
func BuildCompose(ctx context.Context, out string) error {
	return buildPlugin(ctx, ComposeModule+"/cmd", ComposeVersion, out)
}

// BuildBuildx builds buildx from its Go module into out (the
// docker-buildx CLI plugin), unless out already exists.
func BuildBuildx(ctx context.Context, out string) error {
	return buildPlugin(ctx, BuildxModule+"/cmd/buildx", BuildxVersion, out)
}

// buildPlugin builds the main package pkg at version into out. It goes
// through a throwaway main module: compose's own go.mod has exclude
// directives, which `go install pkg@version` refuses.
func buildPlugin(ctx context.Context, pkg, version, out string) error {
	if _, err := os.Stat(out); err == nil {
		return nil
	}
	work, err := os.MkdirTemp("", "husk-plugin-build-")
	if err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	defer os.RemoveAll(work)
	steps := [][]string{
		{"go", "mod", "init", "huskpluginbuild"},
		{"go", "get", pkg + "@" + version},
		{"go", "build", "-trimpath", "-o", out + ".tmp", pkg},
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, s[0], s[1:]...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
		if b, err := cmd.CombinedOutput(); err != nil {
			os.Remove(out + ".tmp")
			return fmt.Errorf("build %s: %s: %w\n%s", pkg, s, err, b)
		}
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	return nil
}
