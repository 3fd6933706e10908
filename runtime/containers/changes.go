package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
)

// Changes lists what the container's writable layer adds, changes and
// deletes relative to its image (docker diff), for a running container and
// for a stopped one alike.
func (m *Manager) Changes(ctx context.Context, ref string) ([]container.FilesystemChange, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return nil, err
	}
	client, release, err := c.guestAgent(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	changes, err := client.Changes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the changes of %s: %w", c.rec.ID[:12], err)
	}
	out := make([]container.FilesystemChange, len(changes))
	for i, ch := range changes {
		out[i] = container.FilesystemChange{Path: ch.Path, Kind: container.ChangeType(ch.Kind)}
	}
	return out, nil
}

// Export writes a tar of the container's whole filesystem to w (docker
// export) and, once all of it went out, publishes "export".
func (m *Manager) Export(ctx context.Context, ref string, w io.Writer) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	client, release, err := c.guestAgent(ctx)
	if err != nil {
		return err
	}
	defer release()
	if err := client.Export(ctx, w); err != nil {
		return fmt.Errorf("export %s: %w", c.rec.ID[:12], err)
	}
	c.emit(events.ActionExport, nil)
	return nil
}

// CommitSource is what a commit needs to know of its container.
type CommitSource struct {
	ID      string
	ImageID string
	// Config is a copy of the container's configuration.
	Config *container.Config
}

// CommitOptions are the container side of a commit.
type CommitOptions struct {
	// Pause holds the container's writes while its layer is read.
	Pause bool
	// Comment goes into the commit event.
	Comment string
}

// ImageWriter stores a container's changes as an image. layer is the
// container's writable layer as an OCI layer tar; reading it to its end
// is what tells the writer that the layer is complete (an incomplete one
// fails the read). It returns the new image's ID and, when it was tagged,
// its familiar reference.
type ImageWriter func(ctx context.Context, src CommitSource, layer io.Reader) (imageID, imageRef string, err error)

// Commit hands the container's writable layer and configuration to write
// (docker commit) and publishes "commit" with the new image.
func (m *Manager) Commit(ctx context.Context, ref string, opts CommitOptions, write ImageWriter) (string, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	src := CommitSource{ID: c.rec.ID, ImageID: c.rec.ImageID, Config: copyConfig(c.rec.Config)}
	c.mu.Unlock()
	client, release, err := c.guestAgent(ctx)
	if err != nil {
		return "", err
	}
	defer release()

	pr, pw := io.Pipe()
	diffDone := make(chan error, 1)
	go func() {
		err := client.DiffLayer(ctx, opts.Pause, pw)
		pw.CloseWithError(err)
		diffDone <- err
	}()
	id, imageRef, werr := write(ctx, src, pr)
	// Stops the agent's stream if write gave up before the end.
	pr.CloseWithError(errors.New("the image was not written"))
	derr := <-diffDone
	if werr != nil {
		if derr != nil && !errors.Is(derr, io.ErrClosedPipe) {
			return "", fmt.Errorf("commit %s: %w (reading its layer: %v)", src.ID[:12], werr, derr)
		}
		return "", werr
	}
	if derr != nil {
		return "", fmt.Errorf("commit %s: read its layer: %w", src.ID[:12], derr)
	}
	c.emit(events.ActionCommit, map[string]string{"comment": opts.Comment, "imageID": id, "imageRef": imageRef})
	return id, nil
}

// copyConfig copies the parts of a config that a commit changes in place.
func copyConfig(cfg *container.Config) *container.Config {
	if cfg == nil {
		return &container.Config{}
	}
	out := *cfg
	out.Env = slices.Clone(cfg.Env)
	out.Cmd = slices.Clone(cfg.Cmd)
	out.Entrypoint = slices.Clone(cfg.Entrypoint)
	out.Shell = slices.Clone(cfg.Shell)
	out.OnBuild = slices.Clone(cfg.OnBuild)
	out.Labels = maps.Clone(cfg.Labels)
	out.Volumes = maps.Clone(cfg.Volumes)
	out.ExposedPorts = maps.Clone(cfg.ExposedPorts)
	if cfg.Healthcheck != nil {
		h := *cfg.Healthcheck
		h.Test = slices.Clone(h.Test)
		out.Healthcheck = &h
	}
	return &out
}
