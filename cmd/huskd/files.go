package main

import (
	"context"
	"io"

	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/apicompat"
	"github.com/husk-vm/husk/imagebuild/commit"
	"github.com/husk-vm/husk/runtime/containers"
)

// containerFiles serves docker diff, export and commit: the runtime reads
// the container's filesystem out of its VM, the commit package makes the
// image.
type containerFiles struct {
	mgr    *containers.Manager
	images commit.Images
}

func (f containerFiles) Changes(ctx context.Context, ref string) ([]container.FilesystemChange, error) {
	return f.mgr.Changes(ctx, ref)
}

func (f containerFiles) Export(ctx context.Context, ref string, w io.Writer) error {
	return f.mgr.Export(ctx, ref, w)
}

func (f containerFiles) Commit(ctx context.Context, ref string, opts apicompat.CommitOptions) (string, error) {
	// A bad --change is refused before a stopped container's VM boots.
	ins, err := f.mgr.Inspect(ctx, ref)
	if err != nil {
		return "", err
	}
	if err := opts.Validate(ins.Config); err != nil {
		return "", err
	}
	return f.mgr.Commit(ctx, ref, containers.CommitOptions{Pause: opts.Pause, Comment: opts.Comment},
		func(ctx context.Context, src containers.CommitSource, layer io.Reader) (string, string, error) {
			return commit.Write(ctx, f.images, commit.Container{ID: src.ID, ImageID: src.ImageID, Config: src.Config}, opts.Options, layer)
		})
}
