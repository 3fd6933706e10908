//go:build linux

package agent

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// DiffRootfs is a Rootfs whose writable layer can be read while it is
// mounted (proto.OpChanges, proto.OpDiffLayer).
type DiffRootfs interface {
	Rootfs
	// DiffDirs returns the overlay's upper directory and the read-only
	// directories below it, top first.
	DiffDirs() (upper string, lowers []string)
	// Freeze holds every write to the upper directory's filesystem until
	// thaw is called.
	Freeze() (thaw func() error, err error)
}

// DiffDirs returns the upper directory on the container's disk and the
// overlay's lower layers: the init layer, the lost+found whiteout if it
// is stacked, and the image's base.
func (g *GuestRootfs) DiffDirs() (string, []string) {
	return filepath.Join(g.dir(), "upper", proto.UpperLayerDir), g.lowerDirs()
}

// The freeze ioctls, _IOWR('X', 119, int) and _IOWR('X', 120, int) from
// linux/fs.h, which golang.org/x/sys/unix does not define.
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

// Freeze freezes the container's upper disk (FIFREEZE). This stands in
// for dockerd's cgroup freezer during commit: the guest has no cgroups for
// the container, and what a commit needs from a pause is one consistent
// state of the files, which a frozen filesystem gives while writers wait.
func (g *GuestRootfs) Freeze() (func() error, error) {
	mnt := filepath.Join(g.dir(), "upper")
	f, err := os.Open(mnt)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", mnt, err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlFIFREEZE, 0); errno != 0 {
		f.Close()
		return nil, fmt.Errorf("freeze %s: %w", mnt, errno)
	}
	return func() error {
		defer f.Close()
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlFITHAW, 0); errno != 0 {
			return fmt.Errorf("thaw %s: %w", mnt, errno)
		}
		return nil
	}, nil
}

// changesOp serves proto.OpChanges, proto.OpDiffLayer and proto.OpExport.
func (a *Agent) changesOp(ctx context.Context, s *stream, req *proto.Request) error {
	a.mu.Lock()
	root := a.root
	a.mu.Unlock()
	if root == "" {
		return &agentError{proto.KindInvalid, fmt.Sprintf("%s: the container root is not set up", req.Op)}
	}
	if req.Op == proto.OpExport {
		return a.export(ctx, s, root)
	}
	dr, ok := a.opts.Rootfs.(DiffRootfs)
	if !ok {
		return &agentError{proto.KindInvalid, fmt.Sprintf("%s: this root has no writable layer to read", req.Op)}
	}
	upper, lowers := dr.DiffDirs()
	if req.Op == proto.OpChanges {
		changes, err := layerChanges(ctx, upper, lowers)
		if err != nil {
			return fmt.Errorf("list changes: %w", err)
		}
		return s.respond(proto.Response{Changes: changes})
	}
	thaw := func() error { return nil }
	if req.Diff != nil && req.Diff.Freeze {
		// Sync first: freezing flushes dirty data anyway, and doing it
		// before holds writers for less time.
		unix.Sync()
		var err error
		if thaw, err = dr.Freeze(); err != nil {
			return err
		}
	}
	// Thawed before the closing Response, so that the host sees the
	// container writable again once the layer is complete.
	werr := s.respond(proto.Response{})
	if werr == nil {
		werr = writeLayer(ctx, s.Conn, upper)
	}
	if err := thaw(); err != nil {
		a.log.Error("thaw the container's disk", "err", err)
	}
	if werr != nil {
		// Ending the stream without the closing Response tells the host
		// that the layer is incomplete.
		a.log.Error("write the container's layer", "err", werr)
		return nil
	}
	_ = s.respond(proto.Response{})
	return nil
}

// layerChanges lists what upper (an overlay upper directory) changes
// relative to lowers (top first), with the results of dockerd 20.10's
// naive diff (archive.ChangesDirs), which is what it reports on this
// kernel: a whiteout deletes its path; an opaque directory deletes every
// lower entry it hides; a path no lower has is added, with everything
// under it; a path a lower has is changed when its mode, owner or device
// differ, or, for anything but a directory, its size or mtime; and a
// directory with any change beneath it is changed. The order is the
// walk's: lexical, each directory before what is under it. Only the
// upper directory is walked, so the cost is that of the changes, not of
// the image.
func layerChanges(ctx context.Context, upper string, lowers []string) ([]proto.Change, error) {
	var out []proto.Change
	err := diffDir(ctx, upper, lowers, "", false, &out)
	return out, err
}

// diffDir appends the changes under rel (relative to upper, "" for the
// root). hidden says that the lowers' content at rel is hidden by an
// opaque directory, or is not there at all.
func diffDir(ctx context.Context, upper string, lowers []string, rel string, hidden bool, out *[]proto.Change) error {
	ents, err := os.ReadDir(filepath.Join(upper, rel))
	if err != nil {
		// The container may remove a directory as we walk.
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := path.Join(rel, e.Name())
		if agentMountPoints[r] {
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(upper, r), &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("stat %s: %w", r, err)
		}
		abs := "/" + r
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
			*out = append(*out, proto.Change{Path: abs, Kind: proto.ChangeDelete})
			continue
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		var lower unix.Stat_t
		found := false
		if !hidden {
			found, err = lowerStat(lowers, r, &lower)
			if err != nil {
				return err
			}
		}
		switch {
		case !found:
			*out = append(*out, proto.Change{Path: abs, Kind: proto.ChangeAdd})
			if isDir {
				if err := diffDir(ctx, upper, lowers, r, true, out); err != nil {
					return err
				}
			}
		case isDir:
			mark := len(*out)
			changed := statDiffers(&lower, &st)
			if changed {
				*out = append(*out, proto.Change{Path: abs, Kind: proto.ChangeModify})
			}
			opaque := xattrs(filepath.Join(upper, r))[overlayXattrPrefix+"opaque"] == "y"
			if opaque {
				if err := hiddenDeletions(upper, lowers, r, out); err != nil {
					return err
				}
			}
			if err := diffDir(ctx, upper, lowers, r, opaque, out); err != nil {
				return err
			}
			if !changed && len(*out) > mark {
				*out = slices.Insert(*out, mark, proto.Change{Path: abs, Kind: proto.ChangeModify})
			}
		case statDiffers(&lower, &st):
			*out = append(*out, proto.Change{Path: abs, Kind: proto.ChangeModify})
		}
	}
	return nil
}

// lowerStat stats rel in the first lower that has it.
func lowerStat(lowers []string, rel string, st *unix.Stat_t) (bool, error) {
	for _, l := range lowers {
		err := unix.Lstat(filepath.Join(l, rel), st)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("stat %s below: %w", rel, err)
		}
		return true, nil
	}
	return false, nil
}

// hiddenDeletions appends a deletion for each entry of the lowers' rel
// that the opaque upper directory rel does not have again.
func hiddenDeletions(upper string, lowers []string, rel string, out *[]proto.Change) error {
	seen := map[string]bool{}
	for _, l := range lowers {
		ents, err := os.ReadDir(filepath.Join(l, rel))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if seen[e.Name()] {
				continue
			}
			seen[e.Name()] = true
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(upper, rel, e.Name()), &st); errors.Is(err, unix.ENOENT) {
				*out = append(*out, proto.Change{Path: "/" + path.Join(rel, e.Name()), Kind: proto.ChangeDelete})
			}
		}
	}
	return nil
}

// statDiffers is dockerd's statDifferent: mode, owner and device always;
// size and mtime only for what is not a directory, whose size and mtime
// say nothing about a change.
func statDiffers(a, b *unix.Stat_t) bool {
	if a.Mode != b.Mode || a.Uid != b.Uid || a.Gid != b.Gid || a.Rdev != b.Rdev {
		return true
	}
	return a.Mode&unix.S_IFMT != unix.S_IFDIR && (!sameFsTime(a.Mtim, b.Mtim) || a.Size != b.Size)
}

// sameFsTime compares mtimes as dockerd does: tar keeps whole seconds, so
// a zero nanosecond part on either side matches any.
func sameFsTime(a, b unix.Timespec) bool {
	return a.Sec == b.Sec && (a.Nsec == b.Nsec || a.Nsec == 0 || b.Nsec == 0)
}

// export writes the container's filesystem as a tar. A bind mount of the
// root that is not recursive shows the overlay alone, without the volumes
// mounted into the root; the process mounts (/proc, /sys, /dev) live in
// the processes' own namespace and are empty directories here, as they
// are in dockerd's export.
func (a *Agent) export(ctx context.Context, s *stream, root string) error {
	if err := os.MkdirAll(a.opts.StateDir, 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	dir, err := os.MkdirTemp(a.opts.StateDir, "export-")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer os.Remove(dir)
	if err := unix.Mount(root, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("export: bind the root: %w", err)
	}
	defer func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			a.log.Error("export: unmount", "dir", dir, "err", err)
		}
	}()
	if err := s.respond(proto.Response{}); err != nil {
		return nil
	}
	if err := writeTree(ctx, s.Conn, dir); err != nil {
		a.log.Error("export the container's filesystem", "err", err)
		return nil
	}
	_ = s.respond(proto.Response{})
	return nil
}

// writeTree writes everything under dir as a tar with names relative to
// it, as dockerd's export does (no entry for dir itself).
func writeTree(ctx context.Context, w io.Writer, dir string) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	tw := tar.NewWriter(bw)
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if d.Type()&fs.ModeSocket != 0 {
			return nil
		}
		err = addEntry(tw, p, filepath.ToSlash(rel), links)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}
