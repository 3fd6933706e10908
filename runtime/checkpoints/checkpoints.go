// Package checkpoints is the on-disk format of container checkpoints: a
// directory per checkpoint holding what the VMM wrote, a copy of the
// container's writable disk, and manifest.json describing both and what
// they may be restored under.
//
//	<dir>/<name>/manifest.json   Manifest
//	<dir>/<name>/...             the files the manifest lists
//
// A checkpoint is built in a hidden temporary directory (".tmp-*") beside
// its final place, every file and the directory fsynced, then renamed into
// place with RENAME_NOREPLACE: a checkpoint exists complete or not at all,
// and two creates of one name cannot both win. The builder holds an
// exclusive flock on its temporary directory, so Clean can tell a build
// whose process died (removable) from one under way (left alone). Removal
// renames into a temporary name first, so a half-removed checkpoint is
// never listed either.
//
// Digests: a writable disk is a sparse file of many GiB holding a little
// data, so a plain sha256 of its bytes would hash gigabytes of zeros on
// every create and restore. A file's digest is therefore "sha256-sparse":
// sha256 over, for each 64 KiB block that is not all zeros, its offset
// (8 bytes, big-endian) followed by its bytes, then the file size (8
// bytes). It depends on the content only, not on where the filesystem put
// holes, and costs the data's size to compute.
package checkpoints

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"golang.org/x/sys/unix"
)

// FormatVersion is written into every manifest; Open refuses others.
const FormatVersion = 1

// ManifestFile names the manifest inside a checkpoint.
const ManifestFile = "manifest.json"

// DigestAlgorithm prefixes every file digest.
const DigestAlgorithm = "sha256-sparse"

const (
	tempPrefix = ".tmp-"
	blockSize  = 64 << 10
)

// NameChars is what a checkpoint name may consist of, in dockerd's words.
const NameChars = `[a-zA-Z0-9][a-zA-Z0-9_.-]`

var namePattern = regexp.MustCompile(`^` + NameChars + `+$`)

// ValidName reports whether name is a checkpoint name dockerd accepts. It
// also keeps names from leaving their directory ("..", "/").
func ValidName(name string) bool {
	return namePattern.MatchString(name) && name != ".." && !strings.HasSuffix(name, ".")
}

// Manifest describes one checkpoint.
type Manifest struct {
	FormatVersion int       `json:"formatVersion"`
	Name          string    `json:"name"`
	Created       time.Time `json:"created"`
	// VMM is the driver that wrote the snapshot and its version; a
	// restore under any other is refused.
	VMM VMM `json:"vmm"`
	// Kernel and Initramfs are "sha256:<hex>" of the guest's boot files:
	// guest memory refers to the kernel it was booted with.
	Kernel    string `json:"kernel"`
	Initramfs string `json:"initramfs"`
	// ContainerID is the checkpointed container; restores may target
	// other containers of ImageID.
	ContainerID string                `json:"containerID"`
	ImageID     string                `json:"imageID"`
	Config      *container.Config     `json:"config"`
	HostConfig  *container.HostConfig `json:"hostConfig,omitempty"`
	MemoryMiB   int                   `json:"memoryMiB"`
	CPUs        int                   `json:"cpus"`
	// Files lists every file of the checkpoint but the manifest.
	Files []File `json:"files"`
}

// VMM identifies a VMM build.
type VMM struct {
	Kind    string `json:"kind"`
	Version string `json:"version"`
}

// File is one file of a checkpoint, by its slash-separated path inside it.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// Dir is a directory of checkpoints: a container's own, or one named by
// --checkpoint-dir.
type Dir string

// Path is where the checkpoint name lives (or would).
func (d Dir) Path(name string) string { return filepath.Join(string(d), name) }

// Exists reports whether a checkpoint, complete or not, holds name.
func (d Dir) Exists(name string) bool {
	_, err := os.Lstat(d.Path(name))
	return err == nil
}

// Create builds the checkpoint name. fill writes the checkpoint's files
// into tmp (a private, empty directory) and returns the manifest's
// descriptive fields; Create sets FormatVersion, Name, Created and Files,
// and publishes it all atomically. It fails with errdefs.ErrAlreadyExists
// when name is taken, and leaves nothing behind on any failure.
func (d Dir) Create(ctx context.Context, name string, fill func(tmp string) (Manifest, error)) (Manifest, error) {
	if !ValidName(name) {
		return Manifest{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid checkpoint name %q", name))
	}
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return Manifest{}, fmt.Errorf("create checkpoint dir: %w", err)
	}
	if d.Exists(name) {
		return Manifest{}, errdefs.ErrAlreadyExists.WithMessage(fmt.Sprintf("checkpoint %s already exists", name))
	}
	tmp, err := os.MkdirTemp(string(d), tempPrefix+name+"-")
	if err != nil {
		return Manifest{}, fmt.Errorf("create checkpoint: %w", err)
	}
	lock, err := lockDir(tmp, true)
	if err != nil {
		os.RemoveAll(tmp)
		return Manifest{}, err
	}
	published := false
	defer func() {
		if !published {
			os.RemoveAll(tmp)
		}
		lock.Close()
	}()
	man, err := fill(tmp)
	if err != nil {
		return Manifest{}, err
	}
	man.FormatVersion = FormatVersion
	man.Name = name
	man.Created = time.Now().UTC()
	man.Files = nil
	err = filepath.WalkDir(tmp, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			return syncPath(p)
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("checkpoint file %s is not a regular file", p)
		}
		rel, _ := filepath.Rel(tmp, p)
		f, err := fileOf(ctx, p, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		man.Files = append(man.Files, f)
		return syncPath(p)
	})
	if err != nil {
		return Manifest{}, fmt.Errorf("seal checkpoint: %w", err)
	}
	b, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return Manifest{}, fmt.Errorf("encode manifest: %w", err)
	}
	if err := writeSynced(filepath.Join(tmp, ManifestFile), b); err != nil {
		return Manifest{}, err
	}
	if err := syncPath(tmp); err != nil {
		return Manifest{}, err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, d.Path(name), unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return Manifest{}, errdefs.ErrAlreadyExists.WithMessage(fmt.Sprintf("checkpoint %s already exists", name))
		}
		return Manifest{}, fmt.Errorf("publish checkpoint %s: %w", name, err)
	}
	published = true
	if err := syncPath(string(d)); err != nil {
		return Manifest{}, err
	}
	return man, nil
}

func fileOf(ctx context.Context, path, rel string) (File, error) {
	digest, size, err := Digest(ctx, path)
	if err != nil {
		return File{}, err
	}
	return File{Path: rel, Size: size, Digest: digest}, nil
}

// Checkpoint is a complete checkpoint opened for reading.
type Checkpoint struct {
	Dir      string
	Manifest Manifest
}

// Path is the absolute path of one of the checkpoint's files.
func (c *Checkpoint) Path(rel string) string { return filepath.Join(c.Dir, filepath.FromSlash(rel)) }

// Open reads the manifest of checkpoint name. The error wraps
// errdefs.ErrNotFound when there is no complete checkpoint of that name,
// errdefs.ErrDataLoss when its manifest is unreadable.
func (d Dir) Open(name string) (*Checkpoint, error) {
	if !ValidName(name) {
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("no checkpoint %q", name))
	}
	p := d.Path(name)
	b, err := os.ReadFile(filepath.Join(p, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("no checkpoint %s in %s", name, d))
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", name, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errdefs.ErrDataLoss.WithMessage(fmt.Sprintf("unreadable manifest: %v", err))
	}
	if m.FormatVersion != FormatVersion {
		return nil, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("format version %d; this husk reads version %d", m.FormatVersion, FormatVersion))
	}
	return &Checkpoint{Dir: p, Manifest: m}, nil
}

// Verify checks that every file the manifest lists is there with its size
// and digest. The error is errdefs.ErrDataLoss naming the first file that
// differs.
func (c *Checkpoint) Verify(ctx context.Context) error {
	for _, f := range c.Manifest.Files {
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
			return errdefs.ErrDataLoss.WithMessage(fmt.Sprintf("its manifest lists a file outside it (%s)", f.Path))
		}
		p := c.Path(f.Path)
		st, err := os.Stat(p)
		if err != nil {
			return errdefs.ErrDataLoss.WithMessage(fmt.Sprintf("%s is missing", f.Path))
		}
		if st.Size() != f.Size {
			return errdefs.ErrDataLoss.WithMessage(fmt.Sprintf("%s has %d bytes, its manifest says %d", f.Path, st.Size(), f.Size))
		}
		digest, _, err := Digest(ctx, p)
		if err != nil {
			return err
		}
		if digest != f.Digest {
			return errdefs.ErrDataLoss.WithMessage(fmt.Sprintf("%s does not match its digest (corrupt or modified)", f.Path))
		}
	}
	return nil
}

// List returns the complete checkpoints in d, oldest first. A missing
// directory holds none.
func (d Dir) List() ([]Manifest, error) {
	entries, err := os.ReadDir(string(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var out []Manifest
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		c, err := d.Open(e.Name())
		if err != nil {
			continue // not a checkpoint of ours, or not a complete one
		}
		out = append(out, c.Manifest)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// Remove deletes checkpoint name; the error wraps errdefs.ErrNotFound if
// there is none. It disappears from List at once, even if the process dies
// while its files are being removed.
func (d Dir) Remove(name string) error {
	if !ValidName(name) || !d.Exists(name) {
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("no checkpoint %s in %s", name, d))
	}
	tmp, err := os.MkdirTemp(string(d), tempPrefix+"rm-")
	if err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", name, err)
	}
	gone := filepath.Join(tmp, name)
	if err := os.Rename(d.Path(name), gone); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("remove checkpoint %s: %w", name, err)
	}
	if err := syncPath(string(d)); err != nil {
		return err
	}
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", name, err)
	}
	return nil
}

// Clean removes what dead builders and removers left in d: temporary
// directories nobody holds a lock on. Builds under way are left alone.
func (d Dir) Clean() error {
	entries, err := os.ReadDir(string(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clean checkpoints: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		p := filepath.Join(string(d), e.Name())
		lock, err := lockDir(p, false)
		if err != nil {
			continue // held: a build under way
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
		lock.Close()
	}
	return errors.Join(errs...)
}

// lockDir takes an exclusive flock on dir, waiting for it when wait is set.
func lockDir(dir string, wait bool) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// Digest returns the sha256-sparse digest of the file at path (see the
// package doc) and its size.
func Digest(ctx context.Context, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("digest: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, fmt.Errorf("digest: %w", err)
	}
	size := st.Size()
	h := sha256.New()
	buf := make([]byte, blockSize)
	var hdr [8]byte
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return "", 0, fmt.Errorf("digest %s: find data: %w", path, err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return "", 0, fmt.Errorf("digest %s: find hole: %w", path, err)
		}
		// Whole blocks, so a block is hashed the same wherever the
		// filesystem's extents begin; a block already hashed is not
		// revisited because off only grows.
		for b := max(off, data-data%blockSize); b < hole; b += blockSize {
			if err := ctx.Err(); err != nil {
				return "", 0, err
			}
			n, err := f.ReadAt(buf, b)
			if err != nil && !errors.Is(err, io.EOF) {
				return "", 0, fmt.Errorf("digest %s: %w", path, err)
			}
			if !allZero(buf[:n]) {
				binary.BigEndian.PutUint64(hdr[:], uint64(b))
				h.Write(hdr[:])
				h.Write(buf[:n])
			}
			off = b + blockSize
		}
	}
	binary.BigEndian.PutUint64(hdr[:], uint64(size))
	h.Write(hdr[:])
	return DigestAlgorithm + ":" + hex.EncodeToString(h.Sum(nil)), size, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// syncPath fsyncs a file or directory.
func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("sync %s: %w", p, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", p, err)
	}
	return nil
}
