//go:build linux

package agent

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// initLayerEntries is what dockerd's init layer puts between an image and
// the container's writable layer: the mount points of the files and file
// systems every container gets, /.dockerenv (which programs test to learn
// they run in a container) and /etc/mtab. An entry is a directory, an
// empty file, or a symlink to its target.
var initLayerEntries = []struct{ path, kind, target string }{
	{"dev/pts", "dir", ""},
	{"dev/shm", "dir", ""},
	{"proc", "dir", ""},
	{"sys", "dir", ""},
	{".dockerenv", "file", ""},
	{"etc/resolv.conf", "file", ""},
	{"etc/hosts", "file", ""},
	{"etc/hostname", "file", ""},
	{"dev/console", "file", ""},
	{"etc/mtab", "symlink", "/proc/mounts"},
}

// writeInitLayer builds the init layer at dir, in the guest's memory, as
// the overlay's lower layer above the image's base (mounted at base). As
// in dockerd, it shadows what the image has at those paths, and it never
// reaches the container's writable layer: docker diff and commit do not
// see it, and an image without /etc still gets its hosts, hostname and
// resolv.conf.
//
// It also hides the base's lost+found, which the ext4 writer always
// creates (rootfs): an empty one is taken to be the writer's, since an
// image's own would be just as empty and is rare.
func writeInitLayer(dir, base string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear init layer: %w", err)
	}
	for _, e := range initLayerEntries {
		p := filepath.Join(dir, e.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("init layer: %w", err)
		}
		var err error
		switch e.kind {
		case "dir":
			err = os.MkdirAll(p, 0o755)
		case "file":
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o755); err == nil {
				err = f.Close()
			}
		case "symlink":
			err = os.Symlink(e.target, p)
		}
		if err != nil {
			return fmt.Errorf("init layer: %w", err)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(base, "lost+found")); err == nil && len(entries) == 0 {
		// A 0:0 character device is overlayfs's whiteout.
		if err := unix.Mknod(filepath.Join(dir, "lost+found"), unix.S_IFCHR, 0); err != nil {
			return fmt.Errorf("init layer: hide lost+found: %w", err)
		}
	}
	return nil
}
