package rootfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// Upper disks are copies of a template formatted once per size, because a
// copy is cheaper than a format and does not need mkfs on every create.
// Measured on the development host (ext4 root, so no reflink; 2 busy cores;
// 8 GiB apparent size; best of 4 runs of 30, the spread is large because
// other builds share the machine): the whole NewUpper from a template, with
// fsync and the directory sync, 8 ms; the same path formatting with
// mkfs.ext4 instead, 12.7 ms. Since the template lost its resize inode
// (below) it holds ~0.3 MiB of data rather than 4.2 MiB, and the copy and
// its fsync of a 16 GiB upper take medians of ~3 ms rather than ~14 ms
// (10 each). With FICLONE (btrfs, XFS) the copy is one ioctl. Every upper
// therefore shares the template's filesystem UUID, which is harmless: each
// VM sees one upper, and ext4 does not refuse duplicate UUIDs.
//
// mkfs options, and why:
//   - keep the journal: the upper holds the container's writes, which must
//     survive a killed VM well enough to restart the container; replaying
//     a small journal on mount is cheap even under TCG.
//   - lazy_journal_init=1: do not write 64 MiB of journal zeros. The journal
//     of a fresh sparse file is a hole, which reads as zeros, so it is as
//     safe as zeroing and keeps the template small.
//   - lazy_itable_init=1 with discard left on (the default): on a regular
//     file mke2fs punches the whole file and, since that reads back as
//     zeros, flags every inode table as zeroed. The guest's ext4lazyinit
//     thread then has nothing to zero on first mount, which under TCG would
//     otherwise compete with the container for the CPU. nodiscard would
//     lose that flag.
//   - no resize_inode: it reserves group descriptor blocks for growing the
//     filesystem to 1024 times its size, and mke2fs writes the 4 MiB of
//     them in the first group, which every create then copied and synced
//     on the path of `docker run`. An upper is never resized.
//   - -m 0: reserving 5% for root makes no sense for a container's scratch
//     space. root_owner=0:0 keeps the root directory root's even when the
//     daemon is not.
//
// The overlay's upper/ and work/ directories come formatted in (mke2fs
// -d), root's, mode 0755, as the guest agent would create them: under TCG
// the guest's two mkdirs on a fresh upper took 35-64 ms of a template
// start, on the path that waits for the container's root. The agent still
// creates them on an upper formatted before they were.
var mkfsArgs = []string{"-q", "-F", "-t", "ext4", "-m", "0", "-O", "^resize_inode",
	"-E", "root_owner=0:0,lazy_itable_init=1,lazy_journal_init=1"}

// templateVersion names templates, so a change of mkfsArgs does not reuse
// templates formatted with the old options.
const templateVersion = "v3"

// MinUpperSize is the smallest upper accepted: room for the journal and
// the metadata with space left for the container.
const MinUpperSize = 64 << 20

// NewUpper creates a sparse writable ext4 disk at path with the given
// apparent size. It fails with errdefs.ErrAlreadyExists if path exists,
// rather than overwriting a container's data.
func (s *Store) NewUpper(ctx context.Context, path string, size int64) error {
	if size < MinUpperSize {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("upper disk size %d is below the minimum of %d bytes", size, MinUpperSize))
	}
	tmpl, err := s.upperTemplate(ctx, size)
	if err != nil {
		return err
	}
	src, err := os.Open(tmpl)
	if err != nil {
		return fmt.Errorf("open upper template: %w", err)
	}
	defer src.Close()
	return createExclusive(path, 0o600, func(dst *os.File) error {
		if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err == nil {
			return nil
		}
		// No reflink on this filesystem (or across filesystems): copy only
		// the template's data, keeping its holes.
		return sparseCopy(ctx, dst, src, size)
	})
}

// upperTemplate returns a formatted template of the given size, making it
// on first use.
func (s *Store) upperTemplate(ctx context.Context, size int64) (string, error) {
	final := filepath.Join(s.templateDir, "upper-"+templateVersion+"-"+strconv.FormatInt(size, 10)+".ext4")
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	unlock, err := s.locks.lock(ctx, final)
	if err != nil {
		return "", fmt.Errorf("wait for upper template: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	err = writeAtomic(final, 0o444, func(f *os.File) error {
		if err := f.Truncate(size); err != nil {
			return fmt.Errorf("size upper template: %w", err)
		}
		return mkfsExt4(ctx, f.Name())
	})
	if err != nil {
		return "", fmt.Errorf("make upper template of %d bytes: %w", size, err)
	}
	return final, nil
}

// mkfsExt4 formats the file at p, which already has its final size, with
// the overlay's directories in it.
func mkfsExt4(ctx context.Context, p string) error {
	bin, err := findMkfs()
	if err != nil {
		return err
	}
	content, err := os.MkdirTemp("", "husk-upper-")
	if err != nil {
		return fmt.Errorf("upper template content: %w", err)
	}
	defer os.RemoveAll(content)
	for _, d := range []string{UpperDir, proto.UpperWorkDir} {
		// Chmod after Mkdir: the mode must not depend on the umask.
		if err := os.Mkdir(filepath.Join(content, d), 0o755); err != nil {
			return fmt.Errorf("upper template content: %w", err)
		}
		if err := os.Chmod(filepath.Join(content, d), 0o755); err != nil {
			return fmt.Errorf("upper template content: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, bin, append(mkfsArgs, "-d", content, p)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, p, err, bytes.TrimSpace(out))
	}
	return nil
}

// findMkfs looks in PATH and then in the sbin directories a daemon's PATH
// often lacks.
func findMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("mkfs.ext4 not found (install e2fsprogs)")
}

// sparseCopy copies src's data extents to dst and gives dst the apparent size
// size. All-zero chunks are skipped too, so filesystems that report no holes
// still get a sparse copy.
func sparseCopy(ctx context.Context, dst, src *os.File, size int64) error {
	fd := int(src.Fd())
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole remains
		}
		if err != nil {
			return fmt.Errorf("find data in %s: %w", src.Name(), err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("find hole in %s: %w", src.Name(), err)
		}
		for off = data; off < hole; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, err := src.ReadAt(buf[:min(int64(len(buf)), hole-off)], off)
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("read %s: %w", src.Name(), err)
			}
			if n == 0 {
				return fmt.Errorf("read %s: unexpected end at %d", src.Name(), off)
			}
			if !isZero(buf[:n]) {
				if _, err := dst.WriteAt(buf[:n], off); err != nil {
					return fmt.Errorf("write %s: %w", dst.Name(), err)
				}
			}
			off += int64(n)
		}
	}
	if err := dst.Truncate(size); err != nil {
		return fmt.Errorf("size %s: %w", dst.Name(), err)
	}
	return nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// createExclusive creates path through a temporary file (see publishFile)
// hard-linked into place: the link fails if path exists, so nothing is
// overwritten.
func createExclusive(path string, perm os.FileMode, fill func(*os.File) error) error {
	return publishFile(path, perm, fill, func(tmp, path string) error {
		if err := os.Link(tmp, path); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return errdefs.ErrAlreadyExists.WithMessage(fmt.Sprintf("upper disk %s already exists", path))
			}
			return fmt.Errorf("link %s into place: %w", path, err)
		}
		return nil
	})
}
