package apicompat

import (
	"context"
	"io"
	"net/http"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/imagebuild/commit"
)

// ContainerFiles serves what reads a container's filesystem as a whole:
// docker diff, export and commit.
type ContainerFiles interface {
	Changes(ctx context.Context, container string) ([]container.FilesystemChange, error)
	// Export writes a tar of the container's filesystem to w.
	Export(ctx context.Context, container string, w io.Writer) error
	// Commit makes an image of the container and returns its ID.
	Commit(ctx context.Context, container string, opts CommitOptions) (string, error)
}

// CommitOptions are POST /commit's parameters; Repo is the familiar
// repository name and Tag its tag, both empty for an untagged image.
type CommitOptions struct {
	commit.Options
	// Pause holds the container's writes while its layer is read
	// (default true).
	Pause bool
}

func (s *server) files() (ContainerFiles, error) {
	if s.cfg.Files == nil {
		return nil, errdefs.ErrNotImplemented.WithMessage("this daemon cannot read container filesystems")
	}
	return s.cfg.Files, nil
}

func (s *server) containerChanges(ctx context.Context, w http.ResponseWriter, _ *http.Request, vars map[string]string) error {
	f, err := s.files()
	if err != nil {
		return err
	}
	changes, err := f.Changes(ctx, vars["name"])
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		// dockerd's list starts nil: no changes is JSON null.
		changes = nil
	}
	return writeJSON(w, http.StatusOK, changes)
}

func (s *server) exportContainer(ctx context.Context, w http.ResponseWriter, _ *http.Request, vars map[string]string) error {
	f, err := s.files()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-tar")
	return f.Export(ctx, vars["name"], w)
}

func (s *server) postCommit(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	f, err := s.files()
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	// The body is an optional container config; clients send none, or
	// JSON null.
	var cfg *container.Config
	if err := readJSON(r, &cfg); err != nil {
		return err
	}
	opts := CommitOptions{
		Options: commit.Options{
			Author: r.Form.Get("author"), Comment: r.Form.Get("comment"),
			Changes: r.Form["changes"], Config: cfg,
		},
		Pause: boolValueOrDefault(r, "pause", true),
	}
	if repo := r.Form.Get("repo"); repo != "" {
		if opts.Repo, opts.Tag, err = tagReference(repo, r.Form.Get("tag")); err != nil {
			return err
		}
	}
	id, err := f.Commit(ctx, r.Form.Get("container"), opts)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, container.CommitResponse{ID: id})
}
