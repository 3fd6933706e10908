//go:build linux

package agent

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// inMountNamespace runs f on an OS thread with a private mount namespace
// of its own, so nothing f mounts reaches the host. The thread is never
// unlocked: it dies with the goroutine, and its namespace with it.
func inMountNamespace(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Errorf("make mounts private: %v", err)
			return
		}
		f()
	}()
	<-done
}

// fakeShares stands in for virtio-fs: tag names a host directory, bound
// with the flags asked for.
func fakeShares(dirs map[string]string) func(tag, dir string, flags uintptr) error {
	return func(tag, dir string, flags uintptr) error {
		src, ok := dirs[tag]
		if !ok {
			return unix.ENODEV
		}
		if err := unix.Mount(src, dir, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		if flags != 0 {
			return unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|flags, "")
		}
		return nil
	}
}

func TestMounts(t *testing.T) {
	inMountNamespace(t, func() {
		root, state := t.TempDir(), t.TempDir()
		outside := t.TempDir()
		vol, roVol, fileShare := t.TempDir(), t.TempDir(), t.TempDir()
		// The image: /data with content to copy up, and a symlink that
		// points out of the root.
		if err := os.MkdirAll(filepath.Join(root, "data/sub"), 0o750); err != nil {
			t.Error(err)
			return
		}
		if err := os.WriteFile(filepath.Join(root, "data/sub/seed"), []byte("seed\n"), 0o640); err != nil {
			t.Error(err)
			return
		}
		if err := os.Chown(filepath.Join(root, "data/sub/seed"), 1234, 5678); err != nil {
			t.Error(err)
			return
		}
		if err := os.Chown(filepath.Join(root, "data"), 1000, 1000); err != nil {
			t.Error(err)
			return
		}
		if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
			t.Error(err)
			return
		}
		if err := os.WriteFile(filepath.Join(fileShare, "file"), []byte("conf\n"), 0o644); err != nil {
			t.Error(err)
			return
		}
		m := &mounter{sharesDir: filepath.Join(state, "shares"),
			mountShare: fakeShares(map[string]string{"husk0": vol, "husk1": roVol, "husk2": fileShare})}
		err := m.apply(root, []proto.MountSpec{
			{Type: proto.MountVirtiofs, Tag: "husk0", Target: "/data", CopyUp: true},
			{Type: proto.MountVirtiofs, Tag: "husk1", Target: "/escape/ro", ReadOnly: true},
			{Type: proto.MountVirtiofs, Tag: "husk2", Path: "file", Target: "/etc/app.conf"},
			{Type: proto.MountTmpfs, Target: "/run/cache", Options: []string{"nosuid", "size=1m", "mode=1770"}},
		})
		if err != nil {
			t.Errorf("apply: %v", err)
			return
		}

		// Copy-up: the volume got the image's content, owners and modes.
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(vol, "sub/seed"), &st); err != nil {
			t.Errorf("copy-up did not reach the volume: %v", err)
		} else if st.Uid != 1234 || st.Gid != 5678 || st.Mode&0o7777 != 0o640 {
			t.Errorf("copied seed: uid %d gid %d mode %o, want 1234 5678 640", st.Uid, st.Gid, st.Mode&0o7777)
		}
		if err := unix.Stat(vol, &st); err != nil || st.Uid != 1000 {
			t.Errorf("volume root owner %d (%v), want the image dir's 1000", st.Uid, err)
		}
		// Writes in the container land in the volume.
		if err := os.WriteFile(filepath.Join(root, "data/new"), []byte("x"), 0o644); err != nil {
			t.Errorf("write in the volume: %v", err)
		} else if _, err := os.Stat(filepath.Join(vol, "new")); err != nil {
			t.Errorf("write did not reach the volume: %v", err)
		}
		// The symlink was resolved inside the root.
		if _, err := os.Stat(filepath.Join(outside, "ro")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a mount point was created outside the root through a symlink: %v", err)
		}
		// /escape points at an absolute path, which is taken inside the
		// root.
		if err := os.WriteFile(filepath.Join(root, outside, "ro/x"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("write in a read-only share: %v, want EROFS", err)
		}
		if b, err := os.ReadFile(filepath.Join(root, "etc/app.conf")); err != nil || string(b) != "conf\n" {
			t.Errorf("file share: %q, %v", b, err)
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(filepath.Join(root, "run/cache"), &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
			t.Errorf("tmpfs not mounted: type %x, %v", fs.Type, err)
		}
		if err := unix.Stat(filepath.Join(root, "run/cache"), &st); err != nil || st.Mode&0o7777 != 0o1770 {
			t.Errorf("tmpfs mode %o (%v), want 1770", st.Mode&0o7777, err)
		}

		if err := m.release(); err != nil {
			t.Errorf("release: %v", err)
		}
		if _, err := os.Stat(filepath.Join(root, "data/new")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the volume is still mounted after release: %v", err)
		}
		if err := unix.Statfs(filepath.Join(root, "run/cache"), &fs); err != nil || fs.Type == unix.TMPFS_MAGIC {
			t.Errorf("tmpfs still mounted after release")
		}
	})
}

func TestCopyUpLeavesFullVolume(t *testing.T) {
	inMountNamespace(t, func() {
		root, vol := t.TempDir(), t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
			t.Error(err)
			return
		}
		for _, f := range []string{filepath.Join(root, "data/image"), filepath.Join(vol, "mine")} {
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Error(err)
				return
			}
		}
		m := &mounter{sharesDir: t.TempDir(), mountShare: fakeShares(map[string]string{"t": vol})}
		if err := m.apply(root, []proto.MountSpec{{Type: proto.MountVirtiofs, Tag: "t", Target: "/data", CopyUp: true}}); err != nil {
			t.Error(err)
			return
		}
		defer m.release()
		if _, err := os.Stat(filepath.Join(vol, "image")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("copy-up wrote into a volume that had content: %v", err)
		}
	})
}

func TestMountErrors(t *testing.T) {
	inMountNamespace(t, func() {
		root := t.TempDir()
		m := &mounter{sharesDir: t.TempDir(), mountShare: fakeShares(nil)}
		for _, spec := range []proto.MountSpec{
			{Type: proto.MountTmpfs, Target: "relative"},
			{Type: proto.MountTmpfs, Target: "/"},
			{Type: proto.MountVirtiofs, Tag: "missing", Target: "/x"},
			{Type: proto.MountVirtiofs, Tag: "t", Path: "../up", Target: "/x"},
			{Type: "nfs", Target: "/x"},
		} {
			err := m.apply(root, []proto.MountSpec{spec})
			var ae *agentError
			if !errors.As(err, &ae) || ae.kind != proto.KindInvalid {
				t.Errorf("%+v: err %v, want an invalid-kind agent error", spec, err)
			}
		}
		if err := m.release(); err != nil {
			t.Errorf("release after failures: %v", err)
		}
	})
}

// TestShareSubpath: a volume's subpath is what gets mounted, and copied
// up into; one that a symlink leads to, even inside the share, is
// refused, as the host resolved the subpath before and a symlink there now
// is the container's doing.
func TestShareSubpath(t *testing.T) {
	inMountNamespace(t, func() {
		root, vol := t.TempDir(), t.TempDir()
		for _, d := range []string{filepath.Join(root, "data"), filepath.Join(vol, "a/b")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Error(err)
				return
			}
		}
		if err := os.WriteFile(filepath.Join(root, "data/seed"), []byte("seed\n"), 0o644); err != nil {
			t.Error(err)
			return
		}
		if err := os.Symlink("/", filepath.Join(vol, "link")); err != nil {
			t.Error(err)
			return
		}
		m := &mounter{sharesDir: t.TempDir(), mountShare: fakeShares(map[string]string{"t": vol, "u": vol})}
		if err := m.apply(root, []proto.MountSpec{{Type: proto.MountVirtiofs, Tag: "t", Path: "a/b", Target: "/data", CopyUp: true}}); err != nil {
			t.Errorf("apply: %v", err)
			return
		}
		defer m.release()
		if b, err := os.ReadFile(filepath.Join(vol, "a/b/seed")); err != nil || string(b) != "seed\n" {
			t.Errorf("copy-up into the subpath: %q, %v", b, err)
		}
		if err := os.WriteFile(filepath.Join(root, "data/new"), nil, 0o644); err != nil {
			t.Errorf("write in the mounted subpath: %v", err)
		} else if _, err := os.Stat(filepath.Join(vol, "a/b/new")); err != nil {
			t.Errorf("write did not land in the subpath: %v", err)
		}
		err := m.apply(root, []proto.MountSpec{{Type: proto.MountVirtiofs, Tag: "u", Path: "link", Target: "/other"}})
		if err == nil || !errors.Is(err, unix.ELOOP) && !strings.Contains(err.Error(), "too many levels of symbolic links") {
			t.Errorf("subpath through a symlink: %v, want ELOOP", err)
		}
	})
}
