//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// mountVirtiofs mounts the virtio-fs device tag on dir.
func mountVirtiofs(tag, dir string, flags uintptr) error {
	return unix.Mount(tag, dir, "virtiofs", flags, "")
}

// mounter applies a SetupSpec's mounts and remembers them for release.
type mounter struct {
	// sharesDir is where each share is mounted before it is bound into
	// the container root.
	sharesDir  string
	mountShare func(tag, dir string, flags uintptr) error
	// mounted lists the mount points made, in order, as absolute paths
	// in the agent's namespace.
	mounted []string
	// tmpfs lists the tmpfs mount points among mounted, which archive
	// operations do not see (see hiddenFromArchive).
	tmpfs []string
	// sockets are the MountSocket listeners, by tag.
	sockets map[string]*socketListener
}

// hiddenFromArchive returns the mount points that docker cp must not look
// through. dockerd serves archive operations from the container's root
// filesystem with its volumes and bind mounts, not from the container's
// mount namespace, so a --tmpfs mount is invisible to it (a documented
// corner case of docker cp): reads see, and writes go to, the directory
// underneath.
func (m *mounter) hiddenFromArchive() []string {
	if m == nil {
		return nil
	}
	return slices.Clone(m.tmpfs)
}

// flagsOf splits mount options into flags and data.
func flagsOf(opts []string, readOnly bool) (uintptr, string) {
	var flags uintptr
	var data []string
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	for _, o := range opts {
		switch o {
		case "noexec":
			flags |= unix.MS_NOEXEC
		case "exec":
			flags &^= unix.MS_NOEXEC
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "suid":
			flags &^= unix.MS_NOSUID
		case "nodev":
			flags |= unix.MS_NODEV
		case "dev":
			flags &^= unix.MS_NODEV
		case "ro":
			flags |= unix.MS_RDONLY
		case "rw":
			flags &^= unix.MS_RDONLY
		case "":
		default:
			data = append(data, o)
		}
	}
	return flags, strings.Join(data, ",")
}

// empty says that nothing was mounted into the root or listened on.
func (m *mounter) empty() bool { return len(m.mounted) == 0 && len(m.sockets) == 0 }

// apply mounts every spec into root, in order. On error, what was mounted
// stays recorded for release.
func (m *mounter) apply(root string, specs []proto.MountSpec) error {
	if len(specs) == 0 {
		return nil
	}
	rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open container root: %w", err)
	}
	defer unix.Close(rootfd)
	for _, spec := range specs {
		if err := m.applyOne(rootfd, spec); err != nil {
			return &agentError{proto.KindInvalid, fmt.Sprintf("mount %s on %s: %v", describe(spec), spec.Target, err)}
		}
	}
	return nil
}

func describe(spec proto.MountSpec) string {
	if spec.Type == proto.MountVirtiofs {
		return "share " + spec.Tag
	}
	return spec.Type
}

func (m *mounter) applyOne(rootfd int, spec proto.MountSpec) error {
	if !path.IsAbs(spec.Target) || path.Clean(spec.Target) == "/" {
		return errors.New("target must be an absolute path other than /")
	}
	flags, data := flagsOf(spec.Options, spec.ReadOnly)
	switch spec.Type {
	case proto.MountTmpfs:
		target, err := openInRoot(rootfd, spec.Target, false)
		if err != nil {
			return err
		}
		defer unix.Close(target)
		where, err := os.Readlink(fdPath(target))
		if err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", fdPath(target), "tmpfs", flags, data); err != nil {
			return err
		}
		m.mounted = append(m.mounted, where)
		m.tmpfs = append(m.tmpfs, where)
		return nil
	case proto.MountVirtiofs:
		return m.applyShare(rootfd, spec, flags)
	case proto.MountSocket:
		return m.applySocket(rootfd, spec)
	}
	return fmt.Errorf("unknown mount type %q", spec.Type)
}

// applyShare mounts the share under sharesDir, fills it from the image
// when asked, and binds it (or the file in it) onto the target.
func (m *mounter) applyShare(rootfd int, spec proto.MountSpec, flags uintptr) error {
	if spec.Tag == "" || strings.ContainsAny(spec.Tag, "/\x00") {
		return fmt.Errorf("bad share tag %q", spec.Tag)
	}
	if spec.Path != "" && !filepath.IsLocal(spec.Path) {
		return fmt.Errorf("share path %q leaves the share", spec.Path)
	}
	shareDir := filepath.Join(m.sharesDir, spec.Tag)
	if err := os.MkdirAll(shareDir, 0o755); err != nil {
		return err
	}
	// The share's own flags (ro, noexec...) carry over to the bind: a
	// bind mount copies its source's per-mount flags.
	if err := m.mountShare(spec.Tag, shareDir, flags); err != nil {
		return fmt.Errorf("mount virtiofs: %w", err)
	}
	m.mounted = append(m.mounted, shareDir)
	src := shareDir
	if spec.Path != "" {
		// Opened beneath the share and through no symlink (a volume's
		// subpath, which the container may have changed since the host
		// resolved it), then used through its descriptor.
		fd, err := openBeneath(shareDir, spec.Path)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		src = fdPath(fd)
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	target, err := openInRoot(rootfd, spec.Target, !st.IsDir())
	if err != nil {
		return err
	}
	defer unix.Close(target)
	if spec.CopyUp && st.IsDir() && !spec.ReadOnly {
		if err := copyUp(fdPath(target), src); err != nil {
			return fmt.Errorf("copy the image's %s into the volume: %w", spec.Target, err)
		}
	}
	// Where the target really is, symlinks resolved, for release.
	where, err := os.Readlink(fdPath(target))
	if err != nil {
		return err
	}
	if err := unix.Mount(src, fdPath(target), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	m.mounted = append(m.mounted, where)
	return nil
}

// release unmounts everything apply mounted, last first, before the
// container root itself is released.
func (m *mounter) release() error {
	for _, l := range m.sockets {
		l.close()
	}
	m.sockets = nil
	var errs []error
	for i := len(m.mounted) - 1; i >= 0; i-- {
		p := m.mounted[i]
		if err := unix.Unmount(p, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			if err2 := unix.Unmount(p, unix.MNT_DETACH); err2 != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	m.mounted, m.tmpfs = nil, nil
	return errors.Join(errs...)
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// openInRoot opens target (absolute, as the container sees it) inside the
// root rootfd refers to, creating what is missing: directories, and the
// last component as an empty file when file is set. The kernel resolves
// every component inside the root (RESOLVE_IN_ROOT), so a symlink in the
// image cannot lead outside it. The result is an O_PATH descriptor to
// mount on through /proc/self/fd.
func openInRoot(rootfd int, target string, file bool) (int, error) {
	p := strings.TrimPrefix(path.Clean("/"+target), "/")
	if p == "" {
		return -1, errors.New("empty target")
	}
	if !file {
		if err := mkdirAllInRoot(rootfd, p, 0); err != nil {
			return -1, err
		}
	} else {
		dir, name := path.Split(p)
		if err := mkdirAllInRoot(rootfd, strings.TrimSuffix(dir, "/"), 0); err != nil {
			return -1, err
		}
		parent, err := openat2(rootfd, dir)
		if err != nil {
			return -1, fmt.Errorf("open %s in the container: %w", "/"+dir, err)
		}
		err = createFileAt(parent, name)
		unix.Close(parent)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("create %s in the container: %w", "/"+p, err)
		}
	}
	fd, err := openat2(rootfd, p)
	if err != nil {
		return -1, fmt.Errorf("open %s in the container: %w", "/"+p, err)
	}
	return fd, nil
}

// mkdirAllInRoot creates the directory p (clean, relative to the root)
// and its parents inside the root. A dangling symlink on the way has its
// target created, as a mount there would follow it.
func mkdirAllInRoot(rootfd int, p string, depth int) error {
	if p == "" || p == "." {
		return nil
	}
	if depth > 40 {
		return fmt.Errorf("create %s in the container: %w", "/"+p, unix.ELOOP)
	}
	fd, err := openat2(rootfd, p)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("open %s in the container: %w", "/"+p, err)
	}
	dir, name := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	if err := mkdirAllInRoot(rootfd, dir, depth+1); err != nil {
		return err
	}
	parent, err := openat2(rootfd, dir)
	if err != nil {
		return fmt.Errorf("open %s in the container: %w", "/"+dir, err)
	}
	defer unix.Close(parent)
	err = unix.Mkdirat(parent, name, 0o755)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("create %s in the container: %w", "/"+p, err)
	}
	// It exists but does not resolve: a dangling symlink.
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(parent, name, buf)
	if err != nil {
		return fmt.Errorf("create %s in the container: %w", "/"+p, err)
	}
	link := string(buf[:n])
	if !path.IsAbs(link) {
		// Relative to the link's directory, which is resolved already:
		// find where it really is inside the root.
		real, err := inRootPath(rootfd, parent)
		if err != nil {
			return err
		}
		link = path.Join(real, link)
	}
	return mkdirAllInRoot(rootfd, strings.TrimPrefix(path.Clean("/"+link), "/"), depth+1)
}

// inRootPath is where fd (under the root) is, as a path from the root.
func inRootPath(rootfd, fd int) (string, error) {
	root, err := os.Readlink(fdPath(rootfd))
	if err != nil {
		return "", err
	}
	p, err := os.Readlink(fdPath(fd))
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(root, p)
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return "", fmt.Errorf("%s is not under the container root %s", p, root)
	}
	return rel, nil
}

func openat2(rootfd int, p string) (int, error) {
	if p == "" {
		p = "."
	}
	return unix.Openat2(rootfd, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// openBeneath opens p, relative to dir, as an O_PATH descriptor, refusing
// any symlink on the way and any path that leaves dir.
func openBeneath(dir, p string) (int, error) {
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat2(dirfd, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, &fs.PathError{Op: "openat2", Path: filepath.Join(dir, p), Err: err}
	}
	return fd, nil
}

func createFileAt(dirfd int, name string) error {
	// The parent came from openat2 as O_PATH; reopen it for mknodat.
	d, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	return unix.Mknodat(d, name, unix.S_IFREG|0o644, 0)
}

// copyUp copies the image's directory src into an empty volume dst: its
// files, links and subdirectories with their owners, modes and times, and
// the directory's own owner and mode. A volume with anything in it is left
// alone, as Docker does.
func copyUp(src, dst string) error {
	entries, err := os.ReadDir(dst)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	if err := copyTree(src, dst); err != nil {
		return err
	}
	return copyMeta(dst, &st, false)
}

func copyTree(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(s, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := os.Mkdir(d, 0o700); err != nil {
				return err
			}
			if err := copyTree(s, d); err != nil {
				return err
			}
		case unix.S_IFREG:
			if err := copyFile(s, d); err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(s)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, d); err != nil {
				return err
			}
		case unix.S_IFIFO, unix.S_IFCHR, unix.S_IFBLK:
			if err := unix.Mknod(d, st.Mode, int(st.Rdev)); err != nil {
				return err
			}
		default:
			// Sockets are not content.
			continue
		}
		if err := copyMeta(d, &st, st.Mode&unix.S_IFMT == unix.S_IFLNK); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copyMeta gives dst the owner, mode and times of st. The mode comes after
// the owner: chown clears set-id bits.
func copyMeta(dst string, st *unix.Stat_t, link bool) error {
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	times := []unix.Timespec{st.Atim, st.Mtim}
	if link {
		return unix.UtimesNanoAt(unix.AT_FDCWD, dst, times, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
		return err
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, times, 0)
}
