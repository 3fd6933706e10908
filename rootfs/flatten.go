package rootfs

import (
	"archive/tar"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strings"
)

const (
	whiteoutPrefix = ".wh."
	// whiteoutMeta prefixes AUFS bookkeeping entries (.wh..wh.plnk, .wh..wh.aufs)
	// that carry no meaning for the merged view.
	whiteoutMeta   = ".wh..wh."
	opaqueWhiteout = ".wh..wh..opq"
	xattrPAXPrefix = "SCHILY.xattr."
)

// entryID names one tar entry: the layer it sits in and its position among
// the headers tar.Reader returns for that layer. Both passes read the same
// immutable layers, so the identity is stable between them.
type entryID struct{ layer, index int }

// inodeRec is one file object of the merged view. Hard links share it.
type inodeRec struct {
	origin entryID // the non-link entry that carries its metadata and content
	src    string  // that entry's cleaned name
}

// node is one path of the merged tree computed by pass 1.
type node struct {
	dir      bool
	hasEntry bool    // false for directories only implied by a descendant
	entry    entryID // metadata source (dirs) or defining entry (non-dirs)
	// layer is the highest layer that created this node, updated it or added
	// something below it. Whiteouts only hide lower layers, so a node whose
	// layer is the whiteout's own layer survives (possibly pruned).
	layer    int
	seq      int64     // creation order; the oldest live name carries a hard-linked file's content
	ino      *inodeRec // non-dirs only
	children map[string]*node
}

func newDir(layer int, seq int64) *node {
	return &node{dir: true, layer: layer, seq: seq, children: map[string]*node{}}
}

// tree is the merged view being computed by pass 1.
type tree struct {
	root *node
	seq  int64
}

// emit tells pass 2 what to write when it meets one entry.
type emit struct {
	src   string   // the entry's cleaned name, checked again in pass 2
	name  string   // name to write the entry under
	links []string // further names hard-linked to name
}

// plan is the result of pass 1: exactly one emission per surviving path.
type plan struct {
	implicit []string // directories with no entry of their own, parents first
	emits    map[entryID]emit
}

// cleanName turns a tar name into a path relative to the image root.
// "" is the root itself. ok is false for names escaping the root, which a
// hostile layer may contain; such entries are dropped.
func cleanName(name string) (p string, ok bool) {
	if name == "" {
		return "", false
	}
	p = path.Clean(strings.TrimLeft(name, "/"))
	switch {
	case p == ".":
		return "", true
	case p == ".." || strings.HasPrefix(p, "../"):
		return "", false
	}
	return p, true
}

// lookup returns the node at p, or nil.
func (t *tree) lookup(p string) *node {
	n := t.root
	if p == "" {
		return n
	}
	for comp := range strings.SplitSeq(p, "/") {
		if n == nil || !n.dir {
			return nil
		}
		n = n.children[comp]
	}
	return n
}

// mkdirAll returns the directory at p, creating missing directories and
// replacing non-directories on the way, and marks every directory on the
// way as touched by layer. Paths are never resolved through symlinks: an
// entry below a symlink replaces it with a directory, where a runtime
// extracting in a chroot would follow it. Layers made by diffing never
// contain such entries, and not following them keeps every entry where its
// name says.
func (t *tree) mkdirAll(p string, layer int) *node {
	n := t.root
	n.layer = layer
	if p == "" {
		return n
	}
	for comp := range strings.SplitSeq(p, "/") {
		c := n.children[comp]
		if c == nil || !c.dir {
			t.seq++
			c = newDir(layer, t.seq)
			n.children[comp] = c
		}
		c.layer = layer
		n = c
	}
	return n
}

// prune removes whatever below n came only from layers lower than layer and
// reports whether n itself survives.
func prune(n *node, layer int) bool {
	if n.layer < layer {
		return false
	}
	if n.dir {
		for name, c := range n.children {
			if !prune(c, layer) {
				delete(n.children, name)
			}
		}
	}
	return true
}

// apply merges one entry of layer into the tree.
func (t *tree) apply(log *slog.Logger, id entryID, hdr *tar.Header) error {
	p, ok := cleanName(hdr.Name)
	if !ok {
		log.Warn("skipping layer entry outside the root", "layer", id.layer, "name", hdr.Name)
		return nil
	}
	dirName, base := path.Split(p)
	dirName = strings.TrimSuffix(dirName, "/")

	if strings.HasPrefix(base, whiteoutPrefix) {
		parent := t.lookup(dirName)
		if parent == nil || !parent.dir {
			return nil // nothing below to hide
		}
		switch {
		case base == opaqueWhiteout:
			for name, c := range parent.children {
				if !prune(c, id.layer) {
					delete(parent.children, name)
				}
			}
		case strings.HasPrefix(base, whiteoutMeta):
		default:
			name := base[len(whiteoutPrefix):]
			if c := parent.children[name]; c != nil && !prune(c, id.layer) {
				delete(parent.children, name)
			}
		}
		return nil
	}

	typ, ok := entryType(hdr.Typeflag)
	if !ok {
		log.Warn("skipping layer entry of unsupported type", "layer", id.layer, "name", hdr.Name, "type", string(hdr.Typeflag))
		return nil
	}

	if p == "" {
		if typ != tar.TypeDir {
			log.Warn("skipping non-directory entry for the root", "layer", id.layer, "name", hdr.Name)
			return nil
		}
		t.root.hasEntry, t.root.entry, t.root.layer = true, id, id.layer
		return nil
	}
	if p == "lost+found" && typ != tar.TypeDir {
		// The ext4 writer always creates lost+found as a directory and cannot
		// replace it; e2fsck needs it anyway.
		log.Warn("skipping non-directory lost+found", "layer", id.layer)
		return nil
	}

	// Resolve a hard link before creating parents, so a link whose own path
	// replaces its target's ancestor still finds the target.
	var ino *inodeRec
	if typ == tar.TypeLink {
		target, ok := cleanName(hdr.Linkname)
		if !ok || target == "" {
			log.Warn("skipping hard link pointing outside the root", "layer", id.layer, "name", hdr.Name, "target", hdr.Linkname)
			return nil
		}
		tn := t.lookup(target)
		if tn == nil {
			return fmt.Errorf("layer %d: hard link %s: target %s not found", id.layer, hdr.Name, hdr.Linkname)
		}
		if tn.dir {
			return fmt.Errorf("layer %d: hard link %s: target %s is a directory", id.layer, hdr.Name, hdr.Linkname)
		}
		ino = tn.ino
	}

	parent := t.mkdirAll(dirName, id.layer)
	existing := parent.children[base]
	t.seq++
	switch {
	case typ == tar.TypeDir && existing != nil && existing.dir:
		// A directory over a directory merges: only the metadata changes.
		existing.hasEntry, existing.entry, existing.layer = true, id, id.layer
	case typ == tar.TypeDir:
		n := newDir(id.layer, t.seq)
		n.hasEntry, n.entry = true, id
		parent.children[base] = n
	case typ == tar.TypeLink:
		if existing != nil && existing.ino == ino {
			existing.layer = id.layer // re-linking a name to its own file
			return nil
		}
		parent.children[base] = &node{hasEntry: true, entry: id, layer: id.layer, seq: t.seq, ino: ino}
	default:
		parent.children[base] = &node{hasEntry: true, entry: id, layer: id.layer, seq: t.seq, ino: &inodeRec{origin: id, src: p}}
	}
	return nil
}

// entryType maps a tar type to the one written to the flattened stream.
func entryType(flag byte) (byte, bool) {
	switch flag {
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeCont:
		// tar.Reader expands sparse files; contiguous files are regular files.
		return tar.TypeReg, true
	case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
		return flag, true
	}
	return 0, false
}

// ctxReader fails reads once ctx is done, so a cancelled build stops
// streaming a large layer promptly.
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

// walkLayer calls fn for every header of layer i.
func walkLayer(ctx context.Context, layers []LayerOpener, i int, fn func(id entryID, hdr *tar.Header, tr *tar.Reader) error) error {
	rc, err := layers[i]()
	if err != nil {
		return fmt.Errorf("open layer %d: %w", i, err)
	}
	defer rc.Close()
	tr := tar.NewReader(ctxReader{ctx, rc})
	for idx := 0; ; idx++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read layer %d: %w", i, err)
		}
		if err := fn(entryID{i, idx}, hdr, tr); err != nil {
			return err
		}
	}
}

// planLayers is pass 1: it reads every layer, base first, and decides which
// entry supplies each path of the merged view.
func planLayers(ctx context.Context, log *slog.Logger, layers []LayerOpener) (*plan, error) {
	t := &tree{root: newDir(-1, 0)}
	for i := range layers {
		err := walkLayer(ctx, layers, i, func(id entryID, hdr *tar.Header, _ *tar.Reader) error {
			return t.apply(log, id, hdr)
		})
		if err != nil {
			return nil, err
		}
	}

	pl := &plan{emits: map[entryID]emit{}}
	if t.root.hasEntry {
		pl.emits[t.root.entry] = emit{src: "", name: "."}
	}
	type name struct {
		seq  int64
		path string
	}
	names := map[*inodeRec][]name{}
	var walk func(n *node, p string)
	walk = func(n *node, p string) {
		for _, base := range slices.Sorted(maps.Keys(n.children)) {
			c, cp := n.children[base], path.Join(p, base)
			switch {
			case c.dir && c.hasEntry:
				pl.emits[c.entry] = emit{src: cp, name: cp} // directories never move
			case c.dir:
				pl.implicit = append(pl.implicit, cp)
			default:
				names[c.ino] = append(names[c.ino], name{c.seq, cp})
			}
			if c.dir {
				walk(c, cp)
			}
		}
	}
	walk(t.root, "")
	for ino, ns := range names {
		// The oldest live name is normally the defining entry's own; when that
		// name was deleted or replaced, the content moves to a surviving link.
		slices.SortFunc(ns, func(a, b name) int { return cmp.Compare(a.seq, b.seq) })
		e := emit{src: ino.src, name: ns[0].path}
		for _, n := range ns[1:] {
			e.links = append(e.links, n.path)
		}
		pl.emits[ino.origin] = e
	}
	return pl, nil
}

// writeFlat is pass 2: it re-reads the layers and writes the merged view as
// one tar in which every path appears once and every hard link follows its
// target, which is what the ext4 writer needs.
func writeFlat(ctx context.Context, w io.Writer, pl *plan, layers []LayerOpener) error {
	tw := tar.NewWriter(w)
	for _, p := range pl.implicit {
		// Directories only implied by their content get what a runtime's
		// MkdirAll would give them.
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: p, Mode: 0o755, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	done := 0
	for i := range layers {
		err := walkLayer(ctx, layers, i, func(id entryID, hdr *tar.Header, tr *tar.Reader) error {
			e, ok := pl.emits[id]
			if !ok {
				return nil
			}
			if p, _ := cleanName(hdr.Name); p != e.src {
				return fmt.Errorf("layer %d changed between reads: entry %d is %q, was %q", i, id.index, hdr.Name, e.src)
			}
			done++
			out := flatHeader(hdr, e.name)
			if err := tw.WriteHeader(out); err != nil {
				return fmt.Errorf("write %s: %w", e.name, err)
			}
			if out.Typeflag == tar.TypeReg {
				if _, err := io.Copy(tw, tr); err != nil {
					return fmt.Errorf("copy %s from layer %d: %w", e.name, i, err)
				}
			}
			for _, l := range e.links {
				link := &tar.Header{Typeflag: tar.TypeLink, Name: l, Linkname: e.name, Format: tar.FormatPAX}
				if err := tw.WriteHeader(link); err != nil {
					return fmt.Errorf("write link %s: %w", l, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if done != len(pl.emits) {
		return fmt.Errorf("layers changed between reads: wrote %d of %d entries", done, len(pl.emits))
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish flattened tar: %w", err)
	}
	return nil
}

// flatHeader copies what ext4 can keep from hdr.
func flatHeader(hdr *tar.Header, name string) *tar.Header {
	typ, _ := entryType(hdr.Typeflag)
	out := &tar.Header{
		Typeflag:   typ,
		Name:       name,
		Mode:       hdr.Mode & 0o7777, // some tars also carry the S_IF* type bits
		Uid:        hdr.Uid,
		Gid:        hdr.Gid,
		ModTime:    hdr.ModTime,
		AccessTime: hdr.AccessTime,
		ChangeTime: hdr.ChangeTime,
		Format:     tar.FormatPAX,
	}
	if out.AccessTime.IsZero() {
		out.AccessTime = hdr.ModTime
	}
	if out.ChangeTime.IsZero() {
		out.ChangeTime = hdr.ModTime
	}
	switch typ {
	case tar.TypeReg:
		out.Size = hdr.Size
	case tar.TypeSymlink:
		out.Linkname = hdr.Linkname
	case tar.TypeChar, tar.TypeBlock:
		out.Devmajor, out.Devminor = hdr.Devmajor, hdr.Devminor
	}
	for k, v := range hdr.PAXRecords {
		if strings.HasPrefix(k, xattrPAXPrefix) {
			if out.PAXRecords == nil {
				out.PAXRecords = map[string]string{}
			}
			out.PAXRecords[k] = v
		}
	}
	return out
}
