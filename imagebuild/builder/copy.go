package builder

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/gzip"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/ulikunitz/xz"

	"github.com/husk-vm/husk/imagebuild"
	"github.com/husk-vm/husk/rootfs"
)

// copyRequest is a COPY or ADD after expansion.
type copyRequest struct {
	name  string // "COPY" or "ADD"
	sd    instructions.SourcesAndDest
	from  string
	chown string
	chmod string
	add   bool
	// checksum is ADD --checksum: the digest a downloaded source must
	// have.
	checksum string
}

// copySource is one matched source.
type copySource struct {
	tree  *tarIndex
	path  string // resolved, in tree
	base  string // name it gets inside a destination directory
	isDir bool
	// hidden reports context paths .dockerignore excludes.
	hidden func(string) bool
	// url says the source was downloaded, or is an inline document: its
	// tree is its own, and ADD does not extract it.
	url bool
}

// inlineSource is a COPY <<EOF document as a source: one file, 0644, in
// a tree of its own (closed with the step, and never extracted by ADD,
// as BuildKit does not).
func (bd *build) inlineSource(ctx context.Context, doc instructions.SourceContent) (copySource, error) {
	s, err := bd.fileSource(ctx, path.Base(path.Clean("/"+doc.Path)), []byte(doc.Data), 0o644)
	if err != nil {
		return copySource{}, fmt.Errorf("inline document %s: %w", doc.Path, err)
	}
	return s, nil
}

// fileSource is a source of one file, name, holding data, in a tree of
// its own (which the source's url flag has closed after use).
func (bd *build) fileSource(ctx context.Context, name string, data []byte, mode int64) (copySource, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return copySource{}, err
	}
	if _, err := tw.Write(data); err != nil {
		return copySource{}, err
	}
	if err := tw.Close(); err != nil {
		return copySource{}, err
	}
	tree, err := newTarIndex(ctx, bd.b.tmp, &b)
	if err != nil {
		return copySource{}, err
	}
	return copySource{tree: tree, path: name, base: name, hidden: func(string) bool { return false }, url: true}, nil
}

func (r copyRequest) fail(err error) error {
	return fmt.Errorf("%s failed: %w", r.name, err)
}

// copyCmd is COPY and ADD. The layer is made on the host before the cache
// is asked, because its digest (all names, modes, owners, times and
// contents it holds) is what identifies the sources in the cache key, in
// place of dockerd's tarsum.
func (bd *build) copyCmd(ctx context.Context, st *stage, req copyRequest) error {
	if len(req.sd.SourceContents) > 0 && !bd.opts.BuildKit {
		return bd.needsBuildKit("heredocs require BuildKit. Refer to https://docs.docker.com/go/buildkit/ to learn how to build images with BuildKit enabled", "heredocs")
	}
	tree, isContext, err := bd.sourceTree(ctx, req.from)
	if err != nil {
		return err
	}
	dest := req.sd.DestPath
	endsInSlash := strings.HasSuffix(dest, "/")
	if !path.IsAbs(dest) {
		dest = path.Join("/", st.cfg.Config.WorkingDir, dest)
		if endsInSlash {
			dest += "/"
		}
	}
	srcs, err := bd.collectSources(ctx, tree, isContext, req, dest)
	defer func() {
		for _, s := range srcs {
			if s.url {
				s.tree.Close()
			}
		}
	}()
	if err != nil {
		return err
	}
	for _, doc := range req.sd.SourceContents {
		s, err := bd.inlineSource(ctx, doc)
		if err != nil {
			return req.fail(err)
		}
		srcs = append(srcs, s)
	}
	if len(srcs) > 1 && !strings.HasSuffix(dest, "/") {
		return fmt.Errorf("When using %s with more than one source file, the destination must be a directory and end with a /", req.name)
	}
	uid, gid, err := bd.chownIDs(ctx, st, req.chown)
	if err != nil {
		return err
	}
	if !isContext && req.chown == "" {
		// COPY --from keeps the owners the files have in their stage or
		// image, as dockerd's classic builder does (preserveOwnership).
		uid, gid = keepOwner, keepOwner
	}
	var mode *os.FileMode
	if req.chmod != "" {
		m, err := strconv.ParseUint(req.chmod, 8, 32)
		if err != nil || m > 0o7777 {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid chmod parameter: %s", req.chmod))
		}
		fm := os.FileMode(m)
		mode = &fm
	}
	fs, err := bd.fsIndex(ctx, st)
	if err != nil {
		return err
	}
	spool, err := bd.spoolLayer(ctx, fs, srcTime(srcs), func(lw *layerWriter) error {
		for _, s := range srcs {
			if err := lw.copy(s, dest, uid, gid, mode, req.add); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return req.fail(err)
	}
	defer spool.Close()

	kind := "multi:"
	if len(srcs) == 1 {
		switch {
		case srcs[0].url:
			kind = "" // dockerd names a download by its hash alone
		case srcs[0].isDir:
			kind = "dir:"
		default:
			kind = "file:"
		}
	}
	chownComment := ""
	if req.chown != "" {
		chownComment = "--chown=" + req.chown
	}
	// The destination as written, as dockerd's comment has it.
	comment := fmt.Sprintf("%s %s%s%s in %s ", req.name, chownComment, kind, spool.key, req.sd.DestPath)
	return bd.runStep(ctx, st, nopComment(st, comment, true), false, func(ctx context.Context, _ *intermediate) (*imagebuild.LayerInfo, error) {
		if spool.diffID == emptyTarDiffID {
			return nil, nil
		}
		if _, err := spool.f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		return bd.putLayer(ctx, spool.f)
	})
}

// sourceTree is where a COPY reads from: the context, or the flattened
// filesystem of a stage (by name or index) or of an image.
func (bd *build) sourceTree(ctx context.Context, from string) (*tarIndex, bool, error) {
	if from == "" {
		return bd.ctxDir, true, nil
	}
	id := ""
	if st := bd.stageByName(from); st != nil {
		id = st.imageID
	} else if n, err := strconv.Atoi(from); err == nil && n >= 0 && n < len(bd.stages)-1 {
		id = bd.stages[n].imageID
	}
	if id == "" {
		var err error
		if id, err = bd.ensureImage(ctx, from, false); err != nil {
			return nil, false, fmt.Errorf("invalid from flag value %s: %w", from, err)
		}
	}
	if t, ok := bd.images[id]; ok {
		return t, false, nil
	}
	images := bd.b.opts.Images
	infos, err := images.LayerInfos(ctx, id)
	if err != nil {
		return nil, false, err
	}
	openers := make([]rootfs.LayerOpener, len(infos))
	for i, l := range infos {
		openers[i] = func() (io.ReadCloser, error) { return images.OpenLayer(l) }
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(rootfs.Flatten(ctx, pw, openers)) }()
	t, err := newTarIndex(ctx, bd.b.tmp, pr)
	pr.CloseWithError(errors.New("flattened image not read"))
	if err != nil {
		return nil, false, fmt.Errorf("read the filesystem of %s: %w", from, err)
	}
	bd.images[id] = t
	return t, false, nil
}

func hasWildcards(p string) bool { return strings.ContainsAny(p, "*?[") }

func isURL(s string) bool {
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}

// collectSources expands the sources of req in tree, and downloads those
// that are URLs. The sources it returns are the caller's to close, also
// with an error.
func (bd *build) collectSources(ctx context.Context, tree *tarIndex, isContext bool, req copyRequest, dest string) (out []copySource, _ error) {
	hidden := func(p string) bool { return isContext && bd.ignored(p) }
	for _, src := range req.sd.SourcePaths {
		if isURL(src) {
			if !req.add {
				return out, req.fail(errors.New("source can't be a URL for COPY"))
			}
			s, err := bd.download(ctx, src, dest, req.checksum)
			if err != nil {
				return out, req.fail(err)
			}
			out = append(out, s)
			continue
		}
		if c := path.Clean(src); isContext && (c == ".." || strings.HasPrefix(c, "../")) {
			return out, req.fail(fmt.Errorf("forbidden path outside the build context: %s ()", src))
		}
		rel, _ := cleanRel(src)
		if hasWildcards(rel) {
			n := 0
			err := tree.walk("", func(name string, _ *tarEntry) error {
				if name == "" || hidden(name) {
					return nil
				}
				if ok, _ := path.Match(rel, name); ok {
					out = append(out, bd.source(tree, name, name, hidden))
					n++
				}
				return nil
			})
			if err != nil {
				return out, err
			}
			if n == 0 {
				return out, req.fail(errors.New("no source files were specified"))
			}
			continue
		}
		resolved, ok := tree.resolve(rel, true)
		if !ok || hidden(rel) {
			if isContext {
				return out, req.fail(fmt.Errorf("file not found in build context or excluded by .dockerignore: stat %s: file does not exist", src))
			}
			return out, req.fail(fmt.Errorf("stat %s: file does not exist", src))
		}
		out = append(out, bd.source(tree, resolved, rel, hidden))
	}
	if len(out) == 0 && len(req.sd.SourceContents) == 0 {
		return out, req.fail(errors.New("no source files were specified"))
	}
	return out, nil
}

func (bd *build) source(tree *tarIndex, resolved, asNamed string, hidden func(string) bool) copySource {
	return copySource{tree: tree, path: resolved, base: path.Base("/" + asNamed), isDir: tree.isDir(resolved), hidden: hidden}
}

// srcTime is the newest modification time among the sources' top
// entries: directories a COPY must create get it, so that the layer is a
// function of the sources alone.
func srcTime(srcs []copySource) time.Time {
	var t time.Time
	for _, s := range srcs {
		if e := s.tree.entries[s.path]; e != nil && e.hdr.ModTime.After(t) {
			t = e.hdr.ModTime
		}
	}
	if t.IsZero() {
		t = time.Unix(0, 0)
	}
	return t
}

// chownIDs resolves --chown as dockerd's classic builder does: a missing
// group means the group named like the user, and names are looked up in
// the stage's /etc/passwd and /etc/group.
func (bd *build) chownIDs(ctx context.Context, st *stage, chown string) (int, int, error) {
	if chown == "" {
		return 0, 0, nil
	}
	user, group, ok := strings.Cut(chown, ":")
	if !ok {
		group = user
	}
	lookup := func(file, name, what string) (int, error) {
		if n, err := strconv.Atoi(name); err == nil {
			return n, nil
		}
		b, found, err := bd.readImageFile(ctx, st, file)
		if err != nil {
			return 0, err
		}
		if found {
			for _, line := range strings.Split(string(b), "\n") {
				f := strings.Split(line, ":")
				idx := 2
				if len(f) > idx && f[0] == name {
					if n, err := strconv.Atoi(f[idx]); err == nil {
						return n, nil
					}
				}
			}
		}
		kind := "uid for user"
		if what == "group" {
			kind = "gid for group"
		}
		return 0, fmt.Errorf("unable to convert uid/gid chown string to host mapping: can't find %s %s: no such %s: %s", kind, name, what, name)
	}
	uid, err := lookup("etc/passwd", user, "user")
	if err != nil {
		return 0, 0, err
	}
	gid, err := lookup("etc/group", group, "group")
	if err != nil {
		return 0, 0, err
	}
	return uid, gid, nil
}

// spooledLayer is a layer tar in an unlinked temporary file.
type spooledLayer struct {
	f      *os.File
	diffID string
	// key digests the layer's entries without their times: what a COPY
	// or ADD is cached by (cacheKeyTar).
	key string
}

// cacheKeyTar writes a tar and digests, beside it, every header but its
// times and every byte of content. dockerd's classic builder caches a
// COPY or ADD by its sources' contents and metadata, not their mtimes,
// so a fresh checkout of the same files hits the cache; the layer's own
// digest would change with every touch.
type cacheKeyTar struct {
	*tar.Writer
	key hash.Hash
}

func (k *cacheKeyTar) WriteHeader(h *tar.Header) error {
	fmt.Fprintf(k.key, "%q %c %o %d:%d %d %q %d:%d\n", h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.Size, h.Linkname, h.Devmajor, h.Devminor)
	return k.Writer.WriteHeader(h)
}

func (k *cacheKeyTar) Write(p []byte) (int, error) {
	n, err := k.Writer.Write(p)
	k.key.Write(p[:n])
	return n, err
}

func (s *spooledLayer) Close() error { return s.f.Close() }

// spoolLayer writes a layer with fill into a temporary file and digests
// it.
func (bd *build) spoolLayer(ctx context.Context, fs *fsIndex, dirTime time.Time, fill func(*layerWriter) error) (_ *spooledLayer, err error) {
	f, err := os.CreateTemp(bd.b.tmp, "layer-*.tar")
	if err != nil {
		return nil, fmt.Errorf("create layer spool: %w", err)
	}
	os.Remove(f.Name())
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	h := sha256.New()
	bw := bufio.NewWriter(io.MultiWriter(f, h))
	tw := &cacheKeyTar{Writer: tar.NewWriter(bw), key: sha256.New()}
	lw := &layerWriter{ctx: ctx, tw: tw, fs: fs, made: map[string]bool{}, names: map[string]string{}, dirTime: dirTime}
	if err := fill(lw); err != nil {
		return nil, err
	}
	if err := lw.tw.Close(); err != nil {
		return nil, fmt.Errorf("finish layer: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("write layer spool: %w", err)
	}
	return &spooledLayer{f: f, diffID: "sha256:" + hex.EncodeToString(h.Sum(nil)), key: hex.EncodeToString(tw.key.Sum(nil))}, nil
}

// makeLayer writes a layer with fill and stores it; an empty layer is
// none.
func (bd *build) makeLayer(ctx context.Context, fs *fsIndex, fill func(*layerWriter) error) (*imagebuild.LayerInfo, error) {
	spool, err := bd.spoolLayer(ctx, fs, time.Now().UTC(), fill)
	if err != nil {
		return nil, err
	}
	defer spool.Close()
	if spool.diffID == emptyTarDiffID {
		return nil, nil
	}
	if _, err := spool.f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return bd.putLayer(ctx, spool.f)
}

// layerWriter writes a COPY/ADD/WORKDIR layer against the stage's
// filesystem shape: directories that exist are left out (so their owner
// and mode stay), missing ones are created.
type layerWriter struct {
	ctx     context.Context
	tw      *cacheKeyTar
	fs      *fsIndex
	made    map[string]bool   // directories this layer writes
	names   map[string]string // source path → name in the layer, for hard links
	dirTime time.Time
}

// resolveDest follows symlinks of the stage's filesystem in a destination
// path (clean, relative).
func (lw *layerWriter) resolveDest(rel string) string {
	r, _ := lw.fs.resolve(rel)
	return r
}

func (lw *layerWriter) isDir(rel string) bool {
	return lw.made[rel] || lw.fs.isDir(rel)
}

// keepOwner as a copy's uid and gid keeps each entry's own owner; the
// directories the copy makes are root's then.
const keepOwner = -1

// mkdirAll writes entries for the missing directories of rel (itself
// included), owned by uid:gid with mode 0755, as dockerd's copier creates
// them.
func (lw *layerWriter) mkdirAll(rel string, uid, gid int) error {
	if rel == "" || lw.isDir(rel) {
		return nil
	}
	if uid == keepOwner {
		uid, gid = 0, 0
	}
	if err := lw.mkdirAll(parentOf(rel), uid, gid); err != nil {
		return err
	}
	lw.made[rel] = true
	return lw.tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, Uid: uid, Gid: gid,
		ModTime: lw.dirTime, Format: tar.FormatPAX,
	})
}

// copy writes one source at dest (absolute; a trailing slash means "into
// this directory").
func (lw *layerWriter) copy(s copySource, dest string, uid, gid int, mode *os.FileMode, add bool) error {
	destRel, _ := cleanRel(dest)
	if s.isDir {
		target := lw.resolveDest(destRel)
		if err := lw.mkdirAll(target, uid, gid); err != nil {
			return err
		}
		return s.tree.walk(s.path, func(name string, e *tarEntry) error {
			if name == s.path {
				return nil
			}
			if s.hidden(name) {
				return errSkipDir
			}
			rel := strings.TrimPrefix(name, s.path)
			rel = strings.TrimPrefix(rel, "/")
			return lw.entry(s.tree, name, e, path.Join(target, rel), uid, gid, mode)
		})
	}
	e := s.tree.entries[s.path]
	if add && !s.url && e != nil && e.hdr.Typeflag == tar.TypeReg {
		if r, ok := archiveReader(s.tree.open(e)); ok {
			target := lw.resolveDest(destRel)
			if err := lw.mkdirAll(target, 0, 0); err != nil {
				return err
			}
			return lw.extract(r, target)
		}
	}
	target := destRel
	if strings.HasSuffix(dest, "/") || lw.isDir(lw.resolveDest(destRel)) {
		target = path.Join(lw.resolveDest(destRel), s.base)
	} else {
		target = path.Join(lw.resolveDest(parentOf(destRel)), path.Base(destRel))
	}
	if err := lw.mkdirAll(parentOf(target), uid, gid); err != nil {
		return err
	}
	return lw.entry(s.tree, s.path, e, target, uid, gid, mode)
}

// entry writes one tree entry (nil for a directory implied by its
// contents) as name in the layer.
func (lw *layerWriter) entry(tree *tarIndex, src string, e *tarEntry, name string, uid, gid int, mode *os.FileMode) error {
	if err := lw.ctx.Err(); err != nil {
		return err
	}
	hdr := &tar.Header{Name: name, Uid: uid, Gid: gid, Format: tar.FormatPAX}
	if uid == keepOwner {
		hdr.Uid, hdr.Gid = 0, 0
		if e != nil {
			hdr.Uid, hdr.Gid = e.hdr.Uid, e.hdr.Gid
		}
	}
	var content io.Reader
	if e == nil {
		hdr.Typeflag, hdr.Mode, hdr.ModTime = tar.TypeDir, 0o755, lw.dirTime
	} else {
		hdr.Typeflag, hdr.Mode, hdr.ModTime = e.hdr.Typeflag, e.hdr.Mode&0o7777, e.hdr.ModTime
		switch e.hdr.Typeflag {
		case tar.TypeReg:
			hdr.Size, content = e.hdr.Size, tree.open(e)
		case tar.TypeSymlink:
			hdr.Linkname = e.hdr.Linkname
		case tar.TypeChar, tar.TypeBlock:
			hdr.Devmajor, hdr.Devminor = e.hdr.Devmajor, e.hdr.Devminor
		case tar.TypeLink:
			target, _ := cleanRel(e.hdr.Linkname)
			if linked, ok := lw.names[target]; ok {
				hdr.Linkname = linked
				break
			}
			// The link's target is not part of this copy: copy its content.
			te := tree.entries[target]
			if te == nil || te.hdr.Typeflag != tar.TypeReg {
				return fmt.Errorf("hard link %s points at %s, which is not a regular file", src, e.hdr.Linkname)
			}
			hdr.Typeflag, hdr.Size, content = tar.TypeReg, te.hdr.Size, tree.open(te)
		}
	}
	if hdr.Typeflag == tar.TypeDir {
		hdr.Name += "/"
		lw.made[name] = true
	}
	if mode != nil && hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeLink {
		hdr.Mode = int64(*mode)
	}
	if err := lw.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if content != nil {
		if _, err := io.Copy(lw.tw, content); err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
	}
	lw.names[src] = name
	return nil
}

// archiveReader returns the tar inside a local ADD source when it is one
// (plain, gzip, bzip2 or xz), as dockerd's ADD recognises archives.
func archiveReader(r io.Reader) (io.Reader, bool) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(6)
	var dr io.Reader = br
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, false
		}
		dr = zr
	case bytes.HasPrefix(head, []byte("BZh")):
		dr = bzip2.NewReader(br)
	case bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}):
		xr, err := xz.NewReader(br)
		if err != nil {
			return nil, false
		}
		dr = xr
	}
	tb := bufio.NewReaderSize(dr, 64<<10)
	block, err := tb.Peek(512)
	if err != nil {
		return nil, false
	}
	if _, err := tar.NewReader(bytes.NewReader(block)).Next(); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, false
	}
	return tb, true
}

// extract writes the entries of an archive below dir, keeping their
// owners as dockerd's ADD does.
func (lw *layerWriter) extract(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("extract archive: %w", err)
		}
		rel, _ := cleanRel(hdr.Name)
		if rel == "" || strings.HasPrefix(path.Base(rel), whiteoutPrefix) {
			continue
		}
		name := path.Join(dir, rel)
		if err := lw.mkdirAll(parentOf(name), 0, 0); err != nil {
			return err
		}
		out := &tar.Header{
			Typeflag: hdr.Typeflag, Name: name, Mode: hdr.Mode & 0o7777, Uid: hdr.Uid, Gid: hdr.Gid,
			ModTime: hdr.ModTime, Linkname: hdr.Linkname, Size: hdr.Size,
			Devmajor: hdr.Devmajor, Devminor: hdr.Devminor, Format: tar.FormatPAX,
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
			out.Typeflag = tar.TypeReg
		case tar.TypeDir:
			out.Name += "/"
			lw.made[name] = true
		case tar.TypeLink:
			target, _ := cleanRel(hdr.Linkname)
			out.Linkname, out.Size = path.Join(dir, target), 0
		case tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			out.Size = 0
		default:
			continue
		}
		if err := lw.tw.WriteHeader(out); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(lw.tw, ctxReader{lw.ctx, tr}); err != nil {
				return fmt.Errorf("extract %s: %w", rel, err)
			}
		}
	}
}
