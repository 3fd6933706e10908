package buildkitapi

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/distribution/reference"
	controlapi "github.com/moby/buildkit/api/services/control"
	"github.com/moby/buildkit/session"
	"github.com/moby/buildkit/session/filesync"
	"github.com/tonistiigi/fsutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ImageFiles gives the files of a built image to the exporters that send
// them to the client (docker build -o).
type ImageFiles interface {
	// WriteRootfs writes the filesystem of image id, its layers merged,
	// as a tar.
	WriteRootfs(ctx context.Context, id string, w io.Writer) error
}

// An exportPlan is what a solve's exporters ask for: names in the image
// store (the moby exporter), and the image's files sent back to the
// client, into a directory (local) or as a tar (tar), by the exporter's
// index in the request, which is how the client tells its targets apart.
type exportPlan struct {
	image   bool // the image goes to the store (and is reported)
	tags    []string
	outputs []output
}

type output struct {
	id   int
	kind string // "local" or "tar"
}

// planExport reads a solve's exporters.
func (s *Server) planExport(req *controlapi.SolveRequest) (exportPlan, error) {
	exporters := req.Exporters
	if len(exporters) == 0 && req.ExporterDeprecated != "" {
		exporters = []*controlapi.Exporter{{Type: req.ExporterDeprecated, Attrs: req.ExporterAttrsDeprecated}}
	}
	var plan exportPlan
	for i, e := range exporters {
		switch e.Type {
		case "moby", "image":
			plan.image = true
		case "local", "tar":
			if s.opts.Files == nil {
				return plan, status.Errorf(codes.Unimplemented, "exporter %q is not available: this daemon cannot read its images' files", e.Type)
			}
			plan.outputs = append(plan.outputs, output{id: i, kind: e.Type})
			continue
		default:
			return plan, status.Errorf(codes.Unimplemented, "exporter %q is not supported by husk: builds go to the image store, a directory or a tar", e.Type)
		}
		// push is left to the client: buildx pushes what the moby
		// exporter tagged through the daemon's push endpoint, as dockerd
		// (which ignores the attribute) needs it to.
		for n := range strings.SplitSeq(e.Attrs["name"], ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if _, err := reference.ParseNormalizedNamed(n); err != nil {
				return plan, status.Errorf(codes.InvalidArgument, "invalid reference format %q: %v", n, err)
			}
			plan.tags = append(plan.tags, n)
		}
	}
	return plan, nil
}

// export sends image id's files to the client for each output.
func (s *Server) export(ctx context.Context, caller session.Caller, p *progress, id string, outputs []output) error {
	for _, o := range outputs {
		var err error
		switch o.kind {
		case "tar":
			p.vertex("exporting to client tarball")
			err = s.exportTar(ctx, caller, id, o.id)
		case "local":
			p.vertex("exporting to client directory")
			err = s.exportLocal(ctx, caller, id, o.id)
		}
		p.end(err)
		if err != nil {
			return fmt.Errorf("export to the client (%s): %w", o.kind, err)
		}
	}
	return nil
}

func (s *Server) exportTar(ctx context.Context, caller session.Caller, id string, exporter int) error {
	w, err := filesync.CopyFileWriter(ctx, nil, exporter, caller)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(s.opts.Files.WriteRootfs(ctx, id, pw)) }()
	err = withoutRoot(w, pr)
	pr.CloseWithError(errors.New("export stopped"))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// withoutRoot copies a tar, leaving out an entry for its root directory,
// which BuildKit's tar exporter does not write.
func withoutRoot(w io.Writer, r io.Reader) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("read the image's files: %w", err)
		}
		if path.Clean("/"+h.Name) == "/" {
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// exportLocal unpacks the image into a directory of the daemon's and
// sends that with BuildKit's file sync, which is how the client's target
// receives a directory.
func (s *Server) exportLocal(ctx context.Context, caller session.Caller, id string, exporter int) error {
	dir, err := os.MkdirTemp(s.opts.TempDir, "buildkit-export-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(s.opts.Files.WriteRootfs(ctx, id, pw)) }()
	err = unpack(dir, pr)
	pr.CloseWithError(errors.New("unpack stopped"))
	if err != nil {
		return err
	}
	files, err := fsutil.NewFS(dir)
	if err != nil {
		return err
	}
	return filesync.CopyToCaller(ctx, files, exporter, caller, nil)
}

// unpack writes a flattened image tar into dir. Everything is written
// through an os.Root, so no name or link in the image can reach outside
// dir; devices, FIFOs and sockets are left out, as nothing on the daemon
// should be made from an image's say-so (BuildKit's local exporter runs
// as the client, which cannot make devices either). Directory modes are
// set last, so that a read-only directory can still be filled.
func unpack(dir string, r io.Reader) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirMode struct {
		name string
		mode fs.FileMode
	}
	var dirs []dirMode
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read the image's files: %w", err)
		}
		name := path.Clean("/" + h.Name)[1:]
		if name == "" {
			continue
		}
		mode := h.FileInfo().Mode()
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return err
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
			dirs = append(dirs, dirMode{name, mode.Perm() | mode&(fs.ModeSetgid|fs.ModeSticky)})
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
			if err := root.Chmod(name, mode.Perm()); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := root.Link(path.Clean("/" + h.Linkname)[1:], name); err != nil {
				return err
			}
		}
	}
	for _, d := range slices.Backward(dirs) {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return err
		}
	}
	return nil
}
