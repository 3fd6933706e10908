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
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// LayerRootfs is a Rootfs that build VMs can stack layers on and cut
// layers from (proto.OpApplyLayer, proto.OpCutLayer). Neither is called
// while a process runs.
type LayerRootfs interface {
	Rootfs
	// ApplyLayer stacks an OCI layer tar on top of the root.
	ApplyLayer(ctx context.Context, r io.Reader) error
	// CutLayer writes the root's changes since the last cut or applied
	// layer to w as an OCI layer tar and starts a fresh change set.
	CutLayer(ctx context.Context, w io.Writer) error
}

// ApplyLayer stacks an OCI layer on the root of a GuestRootfs.
func (g *GuestRootfs) ApplyLayer(ctx context.Context, r io.Reader) error {
	return g.stack().apply(ctx, r)
}

// CutLayer turns the root's changes into an OCI layer.
func (g *GuestRootfs) CutLayer(ctx context.Context, w io.Writer) error {
	return g.stack().cut(ctx, w)
}

func (g *GuestRootfs) stack() layerStack {
	d := g.dir()
	return layerStack{base: filepath.Join(d, "base"), disk: filepath.Join(d, "upper"), root: filepath.Join(d, "root")}
}

// layerStack is the overlay of a build VM's root. Everything lives on the
// writable disk mounted at disk: upper/ (the current changes), work/ and
// layers/<n>/ (earlier change sets and applied layers, 1 the oldest), so
// the stack is rebuilt from the directory alone and needs no state in
// memory.
type layerStack struct {
	base, disk, root string
}

// overlayOptions pins the features that would keep an upper directory
// from being a plain diff: a renamed directory recorded as a redirect, or
// a copied-up file recorded as metadata only.
const overlayOptions = "redirect_dir=off,metacopy=off,index=off"

func (l layerStack) upper() string { return filepath.Join(l.disk, proto.UpperLayerDir) }
func (l layerStack) work() string  { return filepath.Join(l.disk, proto.UpperWorkDir) }

// layers returns the stacked layer directories, oldest first.
func (l layerStack) layers() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(l.disk, "layers"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list layers: %w", err)
	}
	var nums []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			nums = append(nums, n)
		}
	}
	sort.Ints(nums)
	out := make([]string, len(nums))
	for i, n := range nums {
		out[i] = filepath.Join(l.disk, "layers", strconv.Itoa(n))
	}
	return out, nil
}

// nextLayer is the directory the next layer goes to.
func (l layerStack) nextLayer() (string, error) {
	ls, err := l.layers()
	if err != nil {
		return "", err
	}
	n := 1
	if len(ls) > 0 {
		last, _ := strconv.Atoi(filepath.Base(ls[len(ls)-1]))
		n = last + 1
	}
	if err := os.MkdirAll(filepath.Join(l.disk, "layers"), 0o700); err != nil {
		return "", fmt.Errorf("create layers dir: %w", err)
	}
	return filepath.Join(l.disk, "layers", strconv.Itoa(n)), nil
}

// remount mounts the overlay again over the stack as it now is, with an
// empty work directory.
func (l layerStack) remount() error {
	if err := unix.Unmount(l.root, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount root: %w", err)
	}
	if err := os.RemoveAll(l.work()); err != nil {
		return fmt.Errorf("clear overlay work dir: %w", err)
	}
	for _, d := range []string{l.upper(), l.work()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	ls, err := l.layers()
	if err != nil {
		return err
	}
	lowers := []string{}
	for i := len(ls) - 1; i >= 0; i-- {
		lowers = append(lowers, ls[i])
	}
	lowers = append(lowers, l.base)
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,%s", strings.Join(lowers, ":"), l.upper(), l.work(), overlayOptions)
	if err := unix.Mount("overlay", l.root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay over %d layers: %w", len(lowers), err)
	}
	return nil
}

// apply extracts an OCI layer into a new layer directory, while the root
// is still mounted so that directories the layer only implies take the
// metadata they have in the root, and stacks it. Uncut changes would end
// up below the new layer, so there must be none.
func (l layerStack) apply(ctx context.Context, r io.Reader) error {
	ents, err := os.ReadDir(l.upper())
	if err != nil {
		return fmt.Errorf("read upper: %w", err)
	}
	if len(ents) > 0 {
		return &agentError{proto.KindInvalid, "apply layer: the root has changes that were not cut"}
	}
	dir, err := l.nextLayer()
	if err != nil {
		return err
	}
	// Extract under a temporary name: a half-applied layer must not be
	// stacked by a later remount.
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("create layer dir: %w", err)
	}
	if err := extractLayer(ctx, r, tmp, l.root); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("apply layer: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("apply layer: %w", err)
	}
	return l.remount()
}

// cut writes the upper as a layer and stacks it. The overlay is unmounted
// first, so the upper is read as a quiescent directory.
func (l layerStack) cut(ctx context.Context, w io.Writer) error {
	if err := unix.Unmount(l.root, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount root: %w", err)
	}
	werr := writeLayer(ctx, w, l.upper())
	dir, err := l.nextLayer()
	if err == nil {
		err = os.Rename(l.upper(), dir)
	}
	if err == nil {
		err = l.remount()
	}
	if werr != nil {
		return fmt.Errorf("cut layer: %w", werr)
	}
	return err
}

// agentMountPoints are the paths the agent creates in a root to mount
// things on for a process; they are not the process's changes.
var agentMountPoints = map[string]bool{
	"proc": true, "sys": true, "dev": true,
	"etc/hostname": true, "etc/hosts": true, "etc/resolv.conf": true,
}

// overlayXattrPrefix marks overlayfs's own attributes, which never go into
// a layer.
const overlayXattrPrefix = "trusted.overlay."

// writeLayer writes the overlay upper dir as an OCI layer tar: a 0/0
// character device (overlay's whiteout) becomes a .wh. file, an opaque
// directory gets a .wh..wh..opq entry, hard links within the layer stay
// links, and extended attributes other than overlay's own go along as PAX
// records.
func writeLayer(ctx context.Context, w io.Writer, upper string) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	tw := tar.NewWriter(bw)
	type inode struct{ dev, ino uint64 }
	links := map[inode]string{}
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if agentMountPoints[rel] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("stat %s: %w", rel, err)
		}
		hdr := &tar.Header{
			Name: rel, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
			ModTime: time.Unix(st.Mtim.Unix()).UTC(), Format: tar.FormatPAX,
		}
		var content *os.File
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			if st.Rdev == 0 {
				dir, base := path.Split(rel)
				return tw.WriteHeader(&tar.Header{Name: dir + ".wh." + base, Typeflag: tar.TypeReg, ModTime: hdr.ModTime, Format: tar.FormatPAX})
			}
			hdr.Typeflag = tar.TypeChar
			hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		case unix.S_IFBLK:
			hdr.Typeflag = tar.TypeBlock
			hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		case unix.S_IFIFO:
			hdr.Typeflag = tar.TypeFifo
		case unix.S_IFSOCK:
			return nil
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("read link %s: %w", rel, err)
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case unix.S_IFDIR:
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case unix.S_IFREG:
			key := inode{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok && st.Nlink > 1 {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				break
			}
			if st.Nlink > 1 {
				links[key] = rel
			}
			f, err := os.Open(p)
			if err != nil {
				return fmt.Errorf("open %s: %w", rel, err)
			}
			defer f.Close()
			hdr.Typeflag, hdr.Size, content = tar.TypeReg, st.Size, f
		}
		opaque := false
		for name, value := range xattrs(p) {
			if name == overlayXattrPrefix+"opaque" && value == "y" {
				opaque = true
			}
			if strings.HasPrefix(name, overlayXattrPrefix) {
				continue
			}
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords["SCHILY.xattr."+name] = value
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write %s: %w", rel, err)
		}
		if content != nil {
			if n, err := io.Copy(tw, content); err != nil || n != st.Size {
				return fmt.Errorf("copy %s (%d of %d bytes): %v", rel, n, st.Size, err)
			}
		}
		if opaque && hdr.Typeflag == tar.TypeDir {
			return tw.WriteHeader(&tar.Header{Name: rel + "/.wh..wh..opq", Typeflag: tar.TypeReg, ModTime: hdr.ModTime, Format: tar.FormatPAX})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// xattrs returns a file's extended attributes (not following symlinks);
// a filesystem without them yields none.
func xattrs(p string) map[string]string {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		return nil
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		n, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			continue
		}
		v := make([]byte, n)
		if n, err = unix.Lgetxattr(p, name, v); err == nil {
			out[name] = string(v[:n])
		}
	}
	return out
}

// extractLayer writes an OCI layer into dir as an overlay layer: a .wh.
// file becomes a 0/0 character device, .wh..wh..opq marks its directory
// opaque. Every parent of an entry is made a real directory first (never
// followed through a symlink), so no name in the layer can reach outside
// dir; directories the layer only implies take their metadata from the
// same path under root, the view the layer goes on top of.
func extractLayer(ctx context.Context, r io.Reader, dir, root string) error {
	tr := tar.NewReader(bufio.NewReaderSize(r, 256<<10))
	type dirTime struct {
		p string
		t time.Time
	}
	var dirTimes []dirTime
	ensureDir := func(rel string) error {
		cur := dir
		done := ""
		for _, part := range strings.Split(rel, "/") {
			if part == "" {
				continue
			}
			cur = filepath.Join(cur, part)
			done = path.Join(done, part)
			st, err := os.Lstat(cur)
			if err == nil && st.IsDir() {
				continue
			}
			if err == nil {
				if err := os.Remove(cur); err != nil {
					return err
				}
			}
			mode, uid, gid := uint32(0o755), 0, 0
			var mtime time.Time
			var rs unix.Stat_t
			if unix.Lstat(filepath.Join(root, done), &rs) == nil && rs.Mode&unix.S_IFMT == unix.S_IFDIR {
				mode, uid, gid = rs.Mode&0o7777, int(rs.Uid), int(rs.Gid)
				mtime = time.Unix(rs.Mtim.Unix())
			}
			if err := os.Mkdir(cur, 0o700); err != nil {
				return err
			}
			if err := os.Lchown(cur, uid, gid); err != nil {
				return err
			}
			if err := os.Chmod(cur, os.FileMode(mode&0o777)|modeBits(mode)); err != nil {
				return err
			}
			if !mtime.IsZero() {
				dirTimes = append(dirTimes, dirTime{cur, mtime})
			}
		}
		return nil
	}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if rel == "" {
			continue
		}
		parent, base := path.Split(rel)
		parent = strings.TrimSuffix(parent, "/")
		if err := ensureDir(parent); err != nil {
			return fmt.Errorf("create parents of %s: %w", rel, err)
		}
		target := filepath.Join(dir, rel)
		switch {
		case base == ".wh..wh..opq":
			if err := unix.Lsetxattr(filepath.Join(dir, parent), overlayXattrPrefix+"opaque", []byte("y"), 0); err != nil {
				return fmt.Errorf("mark %s opaque: %w", parent, err)
			}
			continue
		case strings.HasPrefix(base, ".wh."):
			gone := filepath.Join(dir, parent, strings.TrimPrefix(base, ".wh."))
			if err := os.RemoveAll(gone); err != nil {
				return err
			}
			if err := unix.Mknod(gone, unix.S_IFCHR, 0); err != nil {
				return fmt.Errorf("whiteout %s: %w", gone, err)
			}
			continue
		}
		if st, err := os.Lstat(target); err == nil && !(st.IsDir() && hdr.Typeflag == tar.TypeDir) {
			if err := os.RemoveAll(target); err != nil {
				return err
			}
		}
		mode := uint32(hdr.Mode & 0o7777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			dirTimes = append(dirTimes, dirTime{target, hdr.ModTime})
		case tar.TypeReg, tar.TypeRegA:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", rel, err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			src := filepath.Join(dir, strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/"))
			if err := os.Link(src, target); err != nil {
				return fmt.Errorf("link %s to %s: %w", rel, hdr.Linkname, err)
			}
			continue
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[hdr.Typeflag]
			if err := unix.Mknod(target, kind|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
				return err
			}
		default:
			continue
		}
		if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		for k, v := range hdr.PAXRecords {
			if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && !strings.HasPrefix(name, overlayXattrPrefix) {
				_ = unix.Lsetxattr(target, name, []byte(v), 0)
			}
		}
		if hdr.Typeflag != tar.TypeSymlink {
			// After chown, which clears set-id bits.
			if err := os.Chmod(target, os.FileMode(mode&0o777)|modeBits(mode)); err != nil {
				return err
			}
		}
		if hdr.Typeflag != tar.TypeDir {
			ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
			_ = unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	// Directory times last: creating their contents changed them.
	for i := len(dirTimes) - 1; i >= 0; i-- {
		t := dirTimes[i].t
		ts := []unix.Timespec{unix.NsecToTimespec(t.UnixNano()), unix.NsecToTimespec(t.UnixNano())}
		_ = unix.UtimesNanoAt(unix.AT_FDCWD, dirTimes[i].p, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// modeBits maps the set-id and sticky bits of a Unix mode to Go's.
func modeBits(m uint32) os.FileMode {
	var out os.FileMode
	if m&unix.S_ISUID != 0 {
		out |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		out |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		out |= os.ModeSticky
	}
	return out
}
