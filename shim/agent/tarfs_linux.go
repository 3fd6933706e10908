//go:build linux

package agent

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// The functions here run in the archive helper, chrooted into the container
// root, so absolute paths are the container's and the kernel resolves
// symlinks the way the container would. Extraction goes further and never
// follows a symlink out of the destination (os.Root), so it is safe even
// where it does not run chrooted (its fuzz test).

// absPath makes p absolute and clean but keeps a trailing "/" or "/.",
// which Docker gives meaning to.
func absPath(p string) string {
	abs := path.Join("/", p)
	switch {
	case strings.HasSuffix(p, "/.") && abs != "/":
		return abs + "/."
	case strings.HasSuffix(p, "/") && abs != "/":
		return abs + "/"
	}
	return abs
}

// resolveParent follows symlinks in every element of p but the last, as
// Docker's ResolvePath does.
func resolveParent(p string) (string, error) {
	dir, base := path.Split(p)
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(resolved, "/") + "/" + base, nil
}

func notFound(p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return &agentError{proto.KindNotFound, "no such file or directory: " + p}
	}
	return err
}

// statPath is Docker's StatPath: the last element is not followed, and a
// symlink's LinkTarget is where it leads, fully resolved.
func statPath(p string) (proto.PathStat, error) {
	abs := absPath(p)
	resolved, err := resolveParent(abs)
	if err != nil {
		return proto.PathStat{}, notFound(p, err)
	}
	fi, err := os.Lstat(resolved)
	if err != nil {
		return proto.PathStat{}, notFound(p, err)
	}
	st := proto.PathStat{Name: path.Base(abs), Size: fi.Size(), Mode: uint32(fi.Mode()), Mtime: fi.ModTime()}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return proto.PathStat{}, notFound(p, err)
		}
		st.LinkTarget = target
	}
	return st, nil
}

// writeArchive writes the tar stream of p as Docker's archive endpoint
// does: entries are named from p's last element, even when that element
// was a symlink resolved through a trailing "/".
func writeArchive(w io.Writer, p string) error {
	abs := absPath(p)
	resolved, err := resolveParent(abs)
	if err != nil {
		return notFound(p, err)
	}
	resolved = path.Clean(resolved)
	srcDir, srcBase := path.Dir(resolved), path.Base(resolved)
	rebase := path.Base(abs)
	if resolved == "/" {
		srcDir, srcBase, rebase = "/", ".", "."
	}
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{} // (dev, ino) → first name, for hard links
	top := path.Join(srcDir, srcBase)
	err = filepath.WalkDir(top, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(file, top), "/")
		name := rebase
		if rel != "" {
			name = path.Join(rebase, rel)
		}
		return addEntry(tw, file, name, links)
	})
	if err != nil {
		return notFound(p, err)
	}
	return tw.Close()
}

// addEntry writes file's header, and its content if it is a regular
// file. A socket is left out, as dockerd's archive package does: tar has
// no type for it. (Its directory entry may say otherwise: a socket mount
// is a socket bound over an empty file.)
func addEntry(tw *tar.Writer, file, name string, links map[[2]uint64]string) error {
	fi, err := os.Lstat(file)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket != 0 {
		return nil
	}
	var target string
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err = os.Readlink(file); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return fmt.Errorf("tar header for %s: %w", file, err)
	}
	hdr.Name = name
	hdr.Mode |= tarTypeBits(fi.Mode())
	if fi.IsDir() && !strings.HasSuffix(hdr.Name, "/") {
		hdr.Name += "/"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, seen := links[key]; seen {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
		} else {
			links[key] = name
		}
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// tarTypeBits are the st_mode file-type bits (S_IFREG...) that dockerd's
// archive package ORs into every header's mode and Go's FileInfoHeader
// leaves out; clients see them (e.g. mode 0100644 for a regular file).
func tarTypeBits(m fs.FileMode) int64 {
	switch {
	case m.IsRegular():
		return unix.S_IFREG
	case m.IsDir():
		return unix.S_IFDIR
	case m&fs.ModeSymlink != 0:
		return unix.S_IFLNK
	case m&fs.ModeNamedPipe != 0:
		return unix.S_IFIFO
	case m&fs.ModeSocket != 0:
		return unix.S_IFSOCK
	case m&fs.ModeCharDevice != 0:
		return unix.S_IFCHR
	case m&fs.ModeDevice != 0:
		return unix.S_IFBLK
	}
	return 0
}

// extractOptions are the knobs of Docker's PUT archive.
type extractOptions struct {
	noOverwriteDirNonDir bool
	// chown, when set, owns every entry instead of the archive's owners.
	chown *[2]int
}

// localName is an archive entry's name relative to the destination: an
// absolute name is confined under it, a name that climbs out of it is
// refused, as in moby's untar.
func localName(name string) (string, error) {
	if clean := path.Clean(name); clean == ".." || strings.HasPrefix(clean, "../") {
		return "", &agentError{proto.KindInvalid, fmt.Sprintf("%q is outside of the destination", name)}
	}
	rel := strings.TrimPrefix(path.Clean("/"+name), "/")
	if rel == "" {
		return ".", nil
	}
	return rel, nil
}

// extractArchive unpacks a tar stream under root.
func extractArchive(r io.Reader, root *os.Root, opts extractOptions) error {
	tr := tar.NewReader(r)
	type dirTime struct {
		name  string
		mtime time.Time
	}
	var dirs []dirTime
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return &agentError{proto.KindInvalid, fmt.Sprintf("read archive: %v", err)}
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := localName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue
		}
		if err := extractEntry(tr, root, name, hdr, opts); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTime{name, hdr.ModTime})
		}
	}
	// Directory times last: their entries changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = root.Chtimes(dirs[i].name, dirs[i].mtime, dirs[i].mtime)
	}
	return nil
}

func extractEntry(tr *tar.Reader, root *os.Root, name string, hdr *tar.Header, opts extractOptions) error {
	fail := func(what string, err error) error {
		var ae *agentError
		if errors.As(err, &ae) {
			return err
		}
		return &agentError{proto.KindInvalid, fmt.Sprintf("%s %s: %v", what, name, err)}
	}
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fail("create parent of", err)
		}
	}
	isDir := hdr.Typeflag == tar.TypeDir
	if fi, err := root.Lstat(name); err == nil {
		if opts.noOverwriteDirNonDir {
			switch {
			case fi.IsDir() && !isDir:
				return &agentError{proto.KindInvalid, fmt.Sprintf("cannot overwrite directory %q with non-directory %q", "/"+name, hdr.Name)}
			case !fi.IsDir() && isDir:
				return &agentError{proto.KindInvalid, fmt.Sprintf("cannot overwrite non-directory %q with directory %q", "/"+name, hdr.Name)}
			}
		}
		if !(fi.IsDir() && isDir) {
			if err := root.RemoveAll(name); err != nil {
				return fail("replace", err)
			}
		}
	}
	mode := hdr.FileInfo().Mode()
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fail("create directory", err)
		}
	case tar.TypeReg, tar.TypeRegA:
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fail("create", err)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fail("write", err)
		}
	case tar.TypeSymlink:
		// As moby: the target, taken from the link's directory, must not
		// climb out of the destination; an absolute one is the
		// container's own path.
		if !strings.HasPrefix(hdr.Linkname, "/") && !filepath.IsLocal(path.Join(path.Dir(name), hdr.Linkname)) {
			return &agentError{proto.KindInvalid, fmt.Sprintf("invalid symlink %q -> %q", hdr.Name, hdr.Linkname)}
		}
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return fail("create symlink", err)
		}
	case tar.TypeLink:
		target, err := localName(hdr.Linkname)
		if err != nil || target == "." {
			return &agentError{proto.KindInvalid, fmt.Sprintf("invalid hardlink %q -> %q", hdr.Name, hdr.Linkname)}
		}
		if err := root.Link(target, name); err != nil {
			return fail("create hard link", err)
		}
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if err := mknodIn(root, name, hdr); err != nil {
			return fail("create device", err)
		}
	default:
		// Other types (sparse, GNU extensions) have no counterpart here.
		return nil
	}
	uid, gid := hdr.Uid, hdr.Gid
	if opts.chown != nil {
		uid, gid = opts.chown[0], opts.chown[1]
	}
	if err := root.Lchown(name, uid, gid); err != nil {
		return fail("chown", err)
	}
	if hdr.Typeflag == tar.TypeSymlink {
		return nil
	}
	// After the chown, which clears set-id bits.
	if err := chmodIn(root, name, hdr.Typeflag, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return fail("chmod", err)
	}
	if hdr.Typeflag != tar.TypeDir {
		if err := root.Chtimes(name, hdr.AccessTime, hdr.ModTime); err != nil {
			return fail("set times of", err)
		}
	}
	return nil
}

// chmodIn sets an entry's mode through a descriptor: Root.Chmod needs
// fchmodat2 (Linux 6.6), newer than the guest kernel. Device nodes and
// fifos are not opened (that could block or have effects); mknod gave
// them their mode already.
func chmodIn(root *os.Root, name string, typ byte, mode fs.FileMode) error {
	switch typ {
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir:
	default:
		return nil
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Chmod(mode)
}

// mknodIn creates a device node or fifo through a directory opened inside
// root, so the path cannot lead elsewhere.
func mknodIn(root *os.Root, name string, hdr *tar.Header) error {
	dir, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer dir.Close()
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeChar:
		mode |= unix.S_IFCHR
	case tar.TypeBlock:
		mode |= unix.S_IFBLK
	case tar.TypeFifo:
		mode |= unix.S_IFIFO
	}
	dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
	if err := unix.Mknodat(int(dir.Fd()), path.Base(name), mode, int(dev)); err != nil {
		return err
	}
	// mknod is subject to the umask; fchmodat without flags is not, and a
	// freshly made node is no symlink to follow.
	return unix.Fchmodat(int(dir.Fd()), path.Base(name), mode&0o7777, 0)
}
