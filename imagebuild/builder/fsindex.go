package builder

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// OCI whiteout markers in layer tars.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// fsNode is what the builder needs to know of one path of a stage's
// filesystem: its type, and a symlink's target.
type fsNode struct {
	typ  byte
	link string
}

// fsIndex is the shape (no contents) of a stage's filesystem, kept on the
// host so that COPY can tell whether its destination is a directory and
// which parent directories it must create, without a VM. It follows the
// stage's layers: sync applies the ones it has not seen.
type fsIndex struct {
	nodes map[string]fsNode // by clean relative path
	seen  int               // layers applied
}

func newFSIndex() *fsIndex { return &fsIndex{nodes: map[string]fsNode{}} }

// sync applies layers[x.seen:].
func (x *fsIndex) sync(ctx context.Context, open func(i int) (io.ReadCloser, error), n int) error {
	for ; x.seen < n; x.seen++ {
		rc, err := open(x.seen)
		if err != nil {
			return err
		}
		err = x.apply(ctx, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("read layer %d: %w", x.seen, err)
		}
	}
	return nil
}

// apply merges one layer tar, honouring its whiteouts: an opaque marker
// hides what lower layers had in its directory, not what this layer adds.
func (x *fsIndex) apply(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(ctxReader{ctx, r})
	added := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name, _ := cleanRel(hdr.Name)
		if name == "" {
			continue
		}
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		switch {
		case base == opaqueMarker:
			x.removeBelow(dir, added)
			continue
		case strings.HasPrefix(base, whiteoutPrefix):
			gone := path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
			delete(x.nodes, gone)
			x.removeBelow(gone, nil)
			continue
		}
		x.mkdirs(dir)
		typ := hdr.Typeflag
		if typ == tar.TypeRegA {
			typ = tar.TypeReg
		}
		if old, ok := x.nodes[name]; ok && old.typ == tar.TypeDir && typ != tar.TypeDir {
			x.removeBelow(name, nil)
		}
		x.nodes[name] = fsNode{typ: typ, link: hdr.Linkname}
		added[name] = true
	}
}

// removeBelow deletes everything under dir except paths in keep.
func (x *fsIndex) removeBelow(dir string, keep map[string]bool) {
	prefix := dir + "/"
	if dir == "" {
		prefix = ""
	}
	for p := range x.nodes {
		if strings.HasPrefix(p, prefix) && p != dir && !keep[p] {
			delete(x.nodes, p)
		}
	}
}

func (x *fsIndex) mkdirs(dir string) {
	for d := dir; d != ""; d = parentOf(d) {
		if n, ok := x.nodes[d]; ok && n.typ == tar.TypeDir {
			return
		}
		x.nodes[d] = fsNode{typ: tar.TypeDir}
	}
}

func parentOf(p string) string {
	d := path.Dir(p)
	if d == "." {
		return ""
	}
	return d
}

// resolve follows symlinks in p (clean, relative) within the root, the last
// element included; found is false when some element does not exist, in
// which case the path is resolved as far as it exists and the rest
// appended.
func (x *fsIndex) resolve(p string) (resolved string, found bool) {
	if p == "" {
		return "", true
	}
	parts := strings.Split(p, "/")
	cur := ""
	for hops := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		next := path.Join(cur, part)
		if part == ".." {
			next = parentOf(cur)
		}
		n, ok := x.nodes[next]
		if !ok {
			return path.Join(append([]string{next}, parts...)...), false
		}
		if n.typ == tar.TypeSymlink {
			if hops++; hops > 255 {
				return next, false
			}
			target := n.link
			if !path.IsAbs(target) {
				target = path.Join("/"+cur, target)
			}
			target, _ = cleanRel(target)
			var rest []string
			if target != "" {
				rest = strings.Split(target, "/")
			}
			parts = append(rest, parts...)
			cur = ""
			continue
		}
		cur = next
	}
	return cur, true
}

// isDir reports whether p, symlinks followed, is an existing directory.
func (x *fsIndex) isDir(p string) bool {
	r, ok := x.resolve(p)
	if !ok {
		return false
	}
	if r == "" {
		return true
	}
	return x.nodes[r].typ == tar.TypeDir
}
