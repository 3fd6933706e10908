//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// guestDevices are the device nodes under dev (the guest's devtmpfs),
// for a privileged container's /dev, as runc's HostDevices finds a host's:
// it leaves out the directories of other filesystems (pts, shm, mqueue)
// and the console, which the container's init gives its own.
func guestDevices(dev string) ([]proto.Device, error) {
	var out []proto.Device
	err := filepath.WalkDir(dev, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != dev && errors.Is(err, fs.ErrNotExist) {
				return nil // gone while walking
			}
			return err
		}
		rel, _ := filepath.Rel(dev, path)
		if d.IsDir() {
			if slices.Contains([]string{"pts", "shm", "mqueue", "fd"}, rel) {
				return fs.SkipDir
			}
			return nil
		}
		if rel == "console" || d.Type()&(fs.ModeDevice|fs.ModeCharDevice) == 0 {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return nil // gone while walking
		}
		out = append(out, proto.Device{
			Block: st.Mode&unix.S_IFMT == unix.S_IFBLK,
			Path:  "/dev/" + rel,
			Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev),
			Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid,
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the guest's devices: %w", err)
	}
	return out, nil
}

// privilegedDevices are the guest's devices, each path that explicit
// (--device) names left to it.
func privilegedDevices(dev string, explicit []proto.Device) ([]proto.Device, error) {
	all, err := guestDevices(dev)
	if err != nil {
		return nil, err
	}
	out := make([]proto.Device, 0, len(all)+len(explicit))
	for _, d := range all {
		if !slices.ContainsFunc(explicit, func(e proto.Device) bool { return filepath.Clean(e.Path) == d.Path }) {
			out = append(out, d)
		}
	}
	return append(out, explicit...), nil
}
