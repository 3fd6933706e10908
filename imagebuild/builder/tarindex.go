package builder

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
)

// tarIndex is a file tree held as an uncompressed tar spooled to a
// temporary file, with an index of its entries: the build context, or the
// flattened filesystem of a stage or image that COPY --from reads. Reading
// a file seeks to its data, so nothing is extracted on the host (no host
// path is ever created from a name chosen by the context's author).
type tarIndex struct {
	f       *os.File
	entries map[string]*tarEntry // by clean relative path; "" is the root
	// children lists the names directly inside each directory, including
	// directories that have no entry of their own.
	children map[string][]string
}

type tarEntry struct {
	hdr    *tar.Header
	offset int64 // of a regular file's data in f
}

// countingReader tells where in the stream archive/tar is, which after
// Next is the start of the entry's data: the reader consumes whole header
// blocks and nothing beyond them.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// cleanRel turns a tar or Dockerfile path into a clean path relative to the
// root; ok is false for paths that climb out of it.
func cleanRel(p string) (string, bool) {
	c := path.Clean("/" + p)
	if c == "/" {
		return "", true
	}
	rel := strings.TrimPrefix(c, "/")
	// path.Clean of "/"+p has already resolved every "..", so anything left
	// is inside the root.
	return rel, true
}

// newTarIndex spools r into a file in dir and indexes it. Names that
// climb out of the root are dropped, as dockerd's extraction refuses them.
func newTarIndex(ctx context.Context, dir string, r io.Reader) (_ *tarIndex, err error) {
	f, err := os.CreateTemp(dir, "tree-*.tar")
	if err != nil {
		return nil, fmt.Errorf("spool build input: %w", err)
	}
	// Unlinked at once: the descriptor keeps it readable, and no error path
	// can leave it behind.
	os.Remove(f.Name())
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	cr := &countingReader{r: io.TeeReader(ctxReader{ctx, r}, f)}
	tr := tar.NewReader(cr)
	t := &tarIndex{f: f, entries: map[string]*tarEntry{}, children: map[string][]string{}}
	kids := map[string]map[string]struct{}{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read tar: %w", err)
		}
		name, _ := cleanRel(hdr.Name)
		e := &tarEntry{hdr: hdr, offset: cr.n}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA {
			hdr.Typeflag = tar.TypeReg
		}
		if name == "" {
			if hdr.Typeflag == tar.TypeDir {
				t.entries[""] = e
			}
			continue
		}
		addParents(kids, name)
		t.entries[name] = e
		// Drain the data so the next offset is right.
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return nil, fmt.Errorf("read tar: %w", err)
		}
	}
	// Read to the end so that the spool holds the whole stream.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, fmt.Errorf("read tar: %w", err)
	}
	for d, names := range kids {
		t.children[d] = slices.Sorted(maps.Keys(names))
	}
	return t, nil
}

// addParents links name into its parent directory, and that directory
// into its own, up to the first link that already exists.
func addParents(kids map[string]map[string]struct{}, name string) {
	for name != "" {
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		if kids[dir] == nil {
			kids[dir] = map[string]struct{}{}
		}
		if _, ok := kids[dir][base]; ok {
			return
		}
		kids[dir][base] = struct{}{}
		name = dir
	}
}

// Close releases the spool.
func (t *tarIndex) Close() error { return t.f.Close() }

// isDir reports whether p (clean, relative) is a directory, explicit or
// implied by its contents.
func (t *tarIndex) isDir(p string) bool {
	if e, ok := t.entries[p]; ok {
		return e.hdr.Typeflag == tar.TypeDir
	}
	_, ok := t.children[p]
	return ok || p == ""
}

func (t *tarIndex) exists(p string) bool {
	_, ok := t.entries[p]
	return ok || t.isDir(p)
}

// open returns a regular file's content.
func (t *tarIndex) open(e *tarEntry) io.Reader {
	return io.NewSectionReader(t.f, e.offset, e.hdr.Size)
}

// readFile returns the content of the regular file at p, following
// symlinks; ok is false when there is none.
func (t *tarIndex) readFile(p string) ([]byte, bool) {
	r, ok := t.resolve(p, true)
	if !ok {
		return nil, false
	}
	e := t.entries[r]
	if e == nil || e.hdr.Typeflag != tar.TypeReg {
		return nil, false
	}
	b, err := io.ReadAll(t.open(e))
	return b, err == nil
}

// resolve follows the symlinks in p (clean, relative) inside the tree, as
// dockerd's FollowSymlinkInScope does: absolute targets start again at
// the root, and nothing climbs above it. The last element is followed only
// when followLast is set. ok is false when p does not exist.
func (t *tarIndex) resolve(p string, followLast bool) (string, bool) {
	parts := strings.Split(p, "/")
	if p == "" {
		return "", true
	}
	cur := ""
	for hops := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		next := path.Join(cur, part)
		if part == ".." {
			next, _ = cleanRel(path.Dir("/" + cur))
		}
		e := t.entries[next]
		if e != nil && e.hdr.Typeflag == tar.TypeSymlink && (len(parts) > 0 || followLast) {
			if hops++; hops > 255 {
				return "", false
			}
			target := e.hdr.Linkname
			if !path.IsAbs(target) {
				target = path.Join("/"+cur, target)
			}
			rest := strings.Split(strings.TrimPrefix(path.Clean(target), "/"), "/")
			if path.Clean(target) == "/" {
				rest = nil
			}
			parts = append(rest, parts...)
			cur = ""
			continue
		}
		if !t.exists(next) {
			return "", false
		}
		cur = next
	}
	return cur, true
}

// errSkipDir tells walk not to descend into a directory.
var errSkipDir = errors.New("skip this directory")

// walk calls fn for p and everything below it, parents before children, in
// name order.
func (t *tarIndex) walk(p string, fn func(name string, e *tarEntry) error) error {
	if err := fn(p, t.entries[p]); err != nil {
		if errors.Is(err, errSkipDir) {
			return nil
		}
		return err
	}
	if !t.isDir(p) {
		return nil
	}
	for _, c := range t.children[p] {
		if err := t.walk(path.Join(p, c), fn); err != nil {
			return err
		}
	}
	return nil
}

// ctxReader stops a long copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
