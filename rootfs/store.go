// Package rootfs turns image layers into the disks a sandbox boots with: one
// read-only ext4 base per image ID, shared by every sandbox of that image, and
// one sparse writable ext4 upper disk per sandbox. The guest mounts them as
// overlayfs lower and upper.
//
// A base is built without mounting anything: pass 1 reads the layers (base
// first) and computes the merged tree, applying OCI whiteouts; pass 2 reads
// them again and streams one flattened tar, in which every path appears once
// and hard links follow their targets, into hcsshim's tar2ext4 through a
// pipe. The flattening is ours because tar2ext4 writes an append-only image
// (no removal, no re-linking) and only knows how to turn whiteouts into
// overlay whiteouts, whereas the base must be the final merged view. Layers
// are therefore opened twice; the alternative, spooling them to disk, costs
// more I/O than decompressing again.
//
// Image options: tar2ext4.InlineData stores files of up to 136 bytes inside
// their inode, which shrinks images of many small files (/etc, scripts) by a
// block each; Linux has mounted inline_data read-only since 3.8 and e2fsck
// checks it, and DAX, the one thing it rules out, is not used. The image is
// marked read-only-compatible by tar2ext4, so it can only be mounted ro, which
// is how the guest mounts it (ro,noload). MaximumDiskSize is raised from the
// 16 GiB default to 128 GiB (tar2ext4's own per-file limit): it only reserves
// group-descriptor blocks (28 KiB more), and images above 16 GiB would fail.
//
// Measured on the development host (2 shared cores, ext4): a 5.1 MB layer
// (static busybox, an applet symlink each, 900 small text files) becomes a
// 6.7 MB base in 35-70 ms, both passes and the fsync included
// (BenchmarkBusyboxBase). Upper disk figures are in upper.go.
package rootfs

import (
	"context"
	_ "crypto/sha256" // lets go-digest validate sha256 image IDs
	_ "crypto/sha512"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/Microsoft/hcsshim/ext4/tar2ext4"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
)

// LayerOpener opens one layer as an uncompressed tar stream. Layers are given
// base first. EnsureBase calls each opener twice (once per pass) and expects
// the same stream both times.
type LayerOpener func() (io.ReadCloser, error)

// maxBaseSize bounds a base image; see the package doc.
const maxBaseSize = 128 << 30

// Store keeps the base images and upper-disk templates in one directory.
type Store struct {
	baseDir     string
	templateDir string
	locks       keyedMutex
	log         *slog.Logger
}

// tmpInfix marks files being written; New removes leftovers of a crash.
const tmpInfix = ".tmp-"

// New opens (creating if needed) a store in dir.
func New(dir string) (*Store, error) {
	s := &Store{
		baseDir:     filepath.Join(dir, "bases"),
		templateDir: filepath.Join(dir, "templates"),
		log:         slog.Default().With("component", "rootfs"),
	}
	for _, d := range []string{s.baseDir, s.templateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create rootfs store %s: %w", d, err)
		}
		if err := removeTemps(d); err != nil {
			return nil, err
		}
	}
	if err := removeOldTemplates(s.templateDir); err != nil {
		return nil, err
	}
	return s, nil
}

// removeOldTemplates deletes the upper templates that another
// templateVersion formatted: no NewUpper copies them any more, and each
// holds a few MiB for as long as it stays.
func removeOldTemplates(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "upper-") || strings.HasPrefix(name, "upper-"+templateVersion+"-") {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove old upper template %s: %w", name, err)
		}
	}
	return nil
}

// removeTemps deletes half-written files a crash left in dir.
func removeTemps(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), tmpInfix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove stale %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// basePath maps an image ID to its base image's path.
func (s *Store) basePath(imageID string) (string, error) {
	d, err := digest.Parse(imageID)
	if err != nil {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid image ID %q: %v", imageID, err))
	}
	return filepath.Join(s.baseDir, d.Algorithm().String()+"-"+d.Encoded()+".ext4"), nil
}

// EnsureBase returns the path of the read-only ext4 base for imageID,
// building it from layers if it does not exist yet. Concurrent callers for
// the same ID wait for one build; a failed or cancelled build leaves nothing
// under the final name.
func (s *Store) EnsureBase(ctx context.Context, imageID string, layers []LayerOpener) (string, error) {
	final, err := s.basePath(imageID)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	unlock, err := s.locks.lock(ctx, final)
	if err != nil {
		return "", fmt.Errorf("wait for base of %s: %w", imageID, err)
	}
	defer unlock()
	if _, err := os.Stat(final); err == nil {
		return final, nil // built while we waited
	}
	if err := s.buildBase(ctx, final, layers); err != nil {
		return "", fmt.Errorf("build base for %s: %w", imageID, err)
	}
	return final, nil
}

// RemoveBase deletes the base for imageID; an absent base is not an error.
// Running sandboxes keep their open descriptor, so removal only frees the
// space once they stop.
func (s *Store) RemoveBase(imageID string) error {
	final, err := s.basePath(imageID)
	if err != nil {
		return err
	}
	unlock, err := s.locks.lock(context.Background(), final)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(final); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove base for %s: %w", imageID, err)
	}
	return syncDir(s.baseDir)
}

// errConverterDone unblocks the tar producer once the converter stops reading.
var errConverterDone = errors.New("ext4 converter stopped reading")

func (s *Store) buildBase(ctx context.Context, final string, layers []LayerOpener) error {
	pl, err := planLayers(ctx, s.log, layers)
	if err != nil {
		return err
	}
	return writeAtomic(final, 0o444, func(f *os.File) error {
		pr, pw := io.Pipe()
		produced := make(chan error, 1)
		go func() {
			err := writeFlat(ctx, pw, pl, layers)
			pw.CloseWithError(err) // nil closes with EOF
			produced <- err
		}()
		convErr := convert(pr, f)
		pr.CloseWithError(errConverterDone)
		prodErr := <-produced
		switch {
		case prodErr != nil && !errors.Is(prodErr, errConverterDone):
			return prodErr // the root cause; the converter only saw a broken stream
		case convErr != nil:
			return fmt.Errorf("convert to ext4: %w", convErr)
		}
		// The converter returns nil only after the end-of-archive marker, so a
		// producer cut off by errConverterDone had nothing left but padding.
		if err := padInodeBitmaps(f); err != nil {
			return fmt.Errorf("fix up ext4 image: %w", err)
		}
		return nil
	})
}

// convert runs tar2ext4, turning its panics (it has a few on states it
// deems impossible) into errors: the layers are untrusted input, and a bad
// image must not take the daemon down.
func convert(r io.Reader, f *os.File) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tar2ext4 panicked: %v", p)
		}
	}()
	return tar2ext4.ConvertTarToExt4(r, f, tar2ext4.InlineData, tar2ext4.MaximumDiskSize(maxBaseSize))
}

// writeAtomic creates final through a temporary file in the same directory
// (see publishFile), renamed into place.
func writeAtomic(final string, perm os.FileMode, fill func(*os.File) error) error {
	return publishFile(final, perm, fill, func(tmp, final string) error {
		if err := os.Rename(tmp, final); err != nil {
			return fmt.Errorf("rename %s into place: %w", final, err)
		}
		return nil
	})
}

// publishFile makes final through a temporary file in the same directory:
// fill writes it, then it is given perm, synced and put in place by place,
// so a crash never leaves a partial file under the final name.
func publishFile(final string, perm os.FileMode, fill func(*os.File) error, place func(tmp, final string) error) error {
	dir := filepath.Dir(final)
	f, err := os.CreateTemp(dir, filepath.Base(final)+tmpInfix+"*")
	if err != nil {
		return fmt.Errorf("create temporary file for %s: %w", final, err)
	}
	// Once renamed, the temporary name is gone and this removes nothing.
	defer os.Remove(f.Name())
	defer f.Close()
	if err := fill(f); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	if err := place(f.Name(), final); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// keyedMutex serialises work per key (an image's base, a template size)
// while letting different keys proceed in parallel. Unlike singleflight, a
// waiter whose leader failed retries with its own context and layers.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	ch   chan struct{} // holds one token while locked
	refs int
}

func (k *keyedMutex) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()

	release := func() {
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
