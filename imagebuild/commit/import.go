package commit

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/husk-vm/husk/imagebuild"
	"github.com/husk-vm/husk/imagebuild/builder"
)

// ImportImages is what an import needs of the image store.
type ImportImages interface {
	PutLayer(ctx context.Context, r io.Reader) (imagebuild.LayerInfo, error)
	ReleaseLayers(layers ...imagebuild.LayerInfo)
	CreateImage(ctx context.Context, cfg v1.ConfigFile, layers []imagebuild.LayerInfo, parent string) (string, error)
	Tag(ctx context.Context, source, repo, tag string) error
}

// ImportOptions are `docker import`'s parameters (POST /images/create with
// fromSrc).
type ImportOptions struct {
	// Repo and Tag name the new image; Repo "" leaves it untagged.
	Repo, Tag string
	// Message is the image's comment and its one history entry's; ""
	// means "Imported from " + Source, as dockerd writes it.
	Message string
	// Source is where the tar came from: "-" for the request body, else
	// its URL.
	Source string
	// Changes are --change lines, applied to an empty config.
	Changes []string
	// Platform is "os/arch[/variant]"; "" means linux/amd64.
	Platform string
}

// ValidateImport checks what can be checked before the tar is read, so
// that a bad --change is refused without consuming an upload.
func ValidateImport(opts ImportOptions) error {
	_, _, err := importConfig(opts)
	return err
}

// importConfig is the new image's platform and config.
func importConfig(opts ImportOptions) (v1.Platform, v1.Config, error) {
	var cfg v1.Config
	plat, err := platform(opts.Platform)
	if err != nil {
		return plat, cfg, err
	}
	err = builder.ApplyChanges(&cfg, opts.Changes)
	return plat, cfg, err
}

func platform(s string) (v1.Platform, error) {
	if s == "" {
		return v1.Platform{OS: "linux", Architecture: "amd64"}, nil
	}
	p, err := v1.ParsePlatform(s)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid platform %q", s))
	}
	return *p, nil
}

// Import stores layer (an uncompressed tar, read to its end) as the one
// layer of a new image whose config is opts.Changes applied to an empty
// one, tags it when opts names a repository, and returns the image ID and
// the familiar reference it was tagged with ("" when untagged). A stream
// that is not a tar archive is refused and nothing is kept.
func Import(ctx context.Context, images ImportImages, layer io.Reader, opts ImportOptions) (id, ref string, err error) {
	plat, cfg, err := importConfig(opts)
	if err != nil {
		return "", "", err
	}
	checked := checkTar(layer)
	info, err := images.PutLayer(ctx, checked.pr)
	if cerr := checked.close(); cerr != nil {
		if err == nil {
			images.ReleaseLayers(info)
		}
		return "", "", cerr
	}
	if err != nil {
		return "", "", fmt.Errorf("import: %w", err)
	}
	defer images.ReleaseLayers(info)
	msg := opts.Message
	if msg == "" {
		msg = "Imported from " + opts.Source
	}
	now := v1.Time{Time: time.Now().UTC()}
	file := v1.ConfigFile{
		Architecture: plat.Architecture,
		Variant:      plat.Variant,
		OS:           plat.OS,
		Created:      now,
		Config:       cfg,
		History:      []v1.History{{Created: now, Comment: msg}},
	}
	id, err = images.CreateImage(ctx, file, []imagebuild.LayerInfo{info}, "")
	if err != nil {
		return "", "", fmt.Errorf("import: %w", err)
	}
	if ref, err = tagNew(ctx, images, id, opts.Repo, opts.Tag); err != nil {
		return "", "", err
	}
	return id, ref, nil
}

// tarChecker passes a stream through unchanged (its bytes are the layer,
// and its digest the diffID, as dockerd registers an imported layer)
// while reading it as a tar archive; a stream that is not one fails the
// read, and err says why in dockerd's words.
type tarChecker struct {
	pr   *io.PipeReader
	done chan struct{} // closed when the checker stopped reading
	err  error         // read after done
}

// close stops the check (if the reader stopped early) and says whether
// the stream was a tar archive.
func (c *tarChecker) close() error {
	c.pr.Close()
	<-c.done
	return c.err
}

func checkTar(r io.Reader) *tarChecker {
	pr, pw := io.Pipe()
	c := &tarChecker{pr: pr, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		tr := tar.NewReader(io.TeeReader(r, pw))
		for {
			_, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				if !errors.Is(err, io.ErrClosedPipe) {
					c.err = fmt.Errorf("Error processing tar file: %w", err)
				}
				pw.CloseWithError(err)
				return
			}
		}
		// What follows the end-of-archive blocks belongs to the layer too.
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err)
	}()
	return c
}
