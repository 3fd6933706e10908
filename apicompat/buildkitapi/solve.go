package buildkitapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/moby/buildkit/session"
	"github.com/moby/buildkit/session/auth"
	"github.com/moby/buildkit/session/filesync"
	"github.com/moby/buildkit/session/secrets"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/patternmatcher/ignorefile"
	fstypes "github.com/tonistiigi/fsutil/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/husk-vm/husk/imagebuild/builder"
)

// sessionWait bounds how long a solve waits for its client's session,
// which the client opens beside the solve.
const sessionWait = 10 * time.Second

// solveDockerfile runs a dockerfile.v0 solve with husk's builder, exports
// the image as plan says and returns its ID.
func (s *Server) solveDockerfile(ctx context.Context, ref, sessionID string, attrs map[string]string, plan exportPlan, j *job) (string, error) {
	opts, err := buildOptions(attrs)
	if err != nil {
		return "", status.Error(codes.Unknown, err.Error())
	}
	opts.Tags = plan.tags
	waitCtx, cancel := context.WithTimeout(ctx, sessionWait)
	caller, err := s.sessions.Get(waitCtx, sessionID, false)
	cancel()
	if err != nil {
		return "", status.Errorf(codes.FailedPrecondition, "no session %s: %v", sessionID, err)
	}
	opts.Credentials = credentials(caller)
	opts.Secret = func(ctx context.Context, id string) ([]byte, error) {
		data, err := secrets.GetSecret(ctx, caller, id)
		if errors.Is(err, secrets.ErrNotFound) || status.Code(err) == codes.Unimplemented {
			return nil, nil // the client has no such secret, or none
		}
		return data, err
	}

	dir, err := os.MkdirTemp(s.opts.TempDir, "buildkit-context-")
	if err != nil {
		return "", fmt.Errorf("make a directory for the build context: %w", err)
	}
	defer os.RemoveAll(dir)

	p := newProgress(j, ref)
	err = s.fetch(ctx, caller, p, &opts, dir)
	p.end(err)
	if err != nil {
		return "", err
	}

	id, err := s.builder.Build(ctx, opts, p.output())
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	err = solveError(err)
	p.end(err)
	if err != nil {
		return "", err
	}
	if err := s.export(ctx, caller, p, id, plan.outputs); err != nil {
		return "", solveError(err)
	}
	return id, nil
}

// fetch pulls the Dockerfile, .dockerignore and the context from the
// client's session into dir, as BuildKit's Dockerfile frontend does:
// the ignore file first, so that ignored files never cross. It sets the
// Dockerfile and the context directory in opts.
func (s *Server) fetch(ctx context.Context, caller session.Caller, p *progress, opts *builder.BuildOptions, dir string) error {
	name := opts.Dockerfile
	p.vertex("[internal] load build definition from " + name)
	dfDir, ignoreDir, ctxDir := filepath.Join(dir, "dockerfile"), filepath.Join(dir, "ignore"), filepath.Join(dir, "context")
	for _, d := range []string{dfDir, ignoreDir, ctxDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("make a directory for the build context: %w", err)
		}
	}
	if err := filesync.FSSync(ctx, caller, filesync.FSSendRequestOpt{
		Name: "dockerfile", DestDir: dfDir,
		IncludePatterns: []string{name, name + ".dockerignore"},
	}); err != nil {
		return fmt.Errorf("failed to read dockerfile: %w", err)
	}
	df, err := readIn(dfDir, name)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to read dockerfile: open %s: no such file or directory", name)
	}
	if err != nil {
		return fmt.Errorf("failed to read dockerfile: %w", err)
	}
	opts.DockerfileContent = df

	p.vertex("[internal] load .dockerignore")
	ignore, err := readIn(dfDir, name+".dockerignore")
	if errors.Is(err, os.ErrNotExist) {
		if err := filesync.FSSync(ctx, caller, filesync.FSSendRequestOpt{
			Name: "context", DestDir: ignoreDir, IncludePatterns: []string{".dockerignore"},
		}); err != nil {
			return fmt.Errorf("failed to read .dockerignore: %w", err)
		}
		ignore, err = readIn(ignoreDir, ".dockerignore")
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to read .dockerignore: %w", err)
	}
	excludes, err := ignorefile.ReadAll(strings.NewReader(string(ignore)))
	if err != nil {
		return fmt.Errorf("failed to parse dockerignore: %w", err)
	}

	p.vertex("[internal] load build context")
	if err := filesync.FSSync(ctx, caller, filesync.FSSendRequestOpt{
		Name: "context", DestDir: ctxDir, ExcludePatterns: excludes, Filter: plainFiles,
	}); err != nil {
		return fmt.Errorf("failed to transfer the build context: %w", err)
	}
	opts.ContextDir = ctxDir
	return nil
}

// plainFiles keeps the files a context may hold: regular files,
// directories and symlinks. A device, FIFO or socket the client sends is
// never made on the host (a build has no use for one: dockerd's classic
// context cannot carry them either).
func plainFiles(_ string, st *fstypes.Stat) bool {
	m := os.FileMode(st.Mode)
	return m.IsRegular() || m.IsDir() || m&os.ModeSymlink != 0
}

// readIn reads a file the client sent into dir, inside dir only.
func readIn(dir, name string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return root.ReadFile(path.Clean("/" + name)[1:])
}

// buildOptions reads the Dockerfile frontend's attributes.
func buildOptions(attrs map[string]string) (builder.BuildOptions, error) {
	opts := builder.BuildOptions{
		Dockerfile: "Dockerfile",
		Target:     attrs["target"],
		Remove:     true,
		BuildKit:   true,
		BuildArgs:  map[string]*string{},
		Labels:     map[string]string{},
	}
	if v := attrs["filename"]; v != "" {
		opts.Dockerfile = v
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := attrs[k]
		switch {
		case strings.HasPrefix(k, "build-arg:"):
			opts.BuildArgs[strings.TrimPrefix(k, "build-arg:")] = &v
		case strings.HasPrefix(k, "label:"):
			opts.Labels[strings.TrimPrefix(k, "label:")] = v
		case strings.HasPrefix(k, "context:"):
			return opts, fmt.Errorf("named build contexts are not supported by husk: %s", strings.TrimPrefix(k, "context:"))
		case k == "no-cache":
			// A list names the stages not to cache; husk's cache is per
			// step, so any list turns it off for the build.
			opts.NoCache = true
		case k == "image-resolve-mode":
			opts.Pull = v == "pull"
		case k == "force-network-mode":
			if v != "sandbox" {
				opts.Network.Mode = v
			}
		case k == "add-hosts":
			for h := range strings.SplitSeq(v, ",") {
				if h = strings.TrimSpace(h); h != "" {
					opts.Network.ExtraHosts = append(opts.Network.ExtraHosts, strings.Replace(h, "=", ":", 1))
				}
			}
		case k == "platform":
			for pl := range strings.SplitSeq(v, ",") {
				if pl != "" && pl != "linux" && pl != "linux/amd64" {
					return opts, fmt.Errorf("%q: husk builds only linux/amd64 images", pl)
				}
			}
			opts.Platform = v
		}
	}
	return opts, nil
}

// credentials asks the client's session for a registry's credentials, as
// BuildKit does; a client that keeps none answers with empty ones.
func credentials(caller session.Caller) func(ctx context.Context, host string) (*registry.AuthConfig, error) {
	return func(ctx context.Context, host string) (*registry.AuthConfig, error) {
		resp, err := auth.NewAuthClient(caller.Conn()).Credentials(ctx, &auth.CredentialsRequest{Host: host})
		if status.Code(err) == codes.Unimplemented {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if resp.Username == "" && resp.Secret == "" {
			return nil, nil
		}
		a := &registry.AuthConfig{Username: resp.Username, Password: resp.Secret, ServerAddress: host}
		if resp.Username == "" {
			a = &registry.AuthConfig{IdentityToken: resp.Secret, ServerAddress: host}
		}
		return a, nil
	}
}

// solveError words a build's failure as BuildKit would. Its code is
// Unknown, as a BuildKit solve's failures are: clients put any other
// code's name before the message.
func solveError(err error) error {
	if err == nil {
		return nil
	}
	var exit *builder.ExitError
	switch {
	case errors.As(err, &exit):
		return status.Errorf(codes.Unknown, "process %q did not complete successfully: exit code: %d", exit.Command, exit.Code)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}
