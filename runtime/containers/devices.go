package containers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// errNotDevice is dockerd's reason for a --device path that is neither a
// device node nor a directory.
var errNotDevice = errors.New("not a device node")

// gatherDevices resolves --device at start, as dockerd does: a host path
// (symlinks followed) names one device node, or a directory whose device
// nodes all go under the container path. A VM has none of the host's
// hardware, so the guest gets a node of the same numbers, which the agent
// refuses unless the guest kernel drives that device. Block devices are
// refused here: in the guest their numbers are the VM's own disks.
// CgroupPermissions are not applied: the guest has no device cgroup, and
// the VM, not the cgroup, is the container's boundary.
func gatherDevices(mappings []container.DeviceMapping) ([]proto.Device, error) {
	var out []proto.Device
	for _, m := range mappings {
		devs, err := devicesAt(m)
		if err != nil {
			return nil, fmt.Errorf("error gathering device information while adding custom device %q: %w", m.PathOnHost, err)
		}
		out = append(out, devs...)
	}
	return out, nil
}

func devicesAt(m container.DeviceMapping) ([]proto.Device, error) {
	hostPath, err := filepath.EvalSymlinks(m.PathOnHost)
	if err != nil {
		return nil, unwrapPathError(err)
	}
	ctrPath := m.PathInContainer
	if ctrPath == "" {
		ctrPath = m.PathOnHost
	}
	st, err := os.Stat(hostPath)
	if err != nil {
		return nil, unwrapPathError(err)
	}
	if !st.IsDir() {
		d, err := deviceNode(hostPath, ctrPath, st)
		if err != nil {
			return nil, err
		}
		return []proto.Device{d}, nil
	}
	var out []proto.Device
	err = filepath.WalkDir(hostPath, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.Type()&(fs.ModeDevice|fs.ModeCharDevice) == 0 {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		d, err := deviceNode(p, filepath.Join(ctrPath, strings.TrimPrefix(p, hostPath)), info)
		if err != nil {
			return err
		}
		out = append(out, d)
		return nil
	})
	return out, err
}

func deviceNode(hostPath, ctrPath string, st fs.FileInfo) (proto.Device, error) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !ok || st.Mode()&fs.ModeDevice == 0:
		return proto.Device{}, errNotDevice
	case st.Mode()&fs.ModeCharDevice == 0:
		return proto.Device{}, errdefs.ErrInvalidArgument.WithMessage(
			fmt.Sprintf("%s is a block device, and a husk VM's block devices are its own disks", hostPath))
	}
	// The agent makes the nodes in the container's fresh /dev tmpfs, where
	// no image content (a symlink, say) can redirect them.
	if ctrPath = filepath.Clean(ctrPath); !strings.HasPrefix(ctrPath, "/dev/") {
		return proto.Device{}, errdefs.ErrInvalidArgument.WithMessage("husk makes device nodes only under /dev, not at " + ctrPath)
	}
	return proto.Device{
		Path: ctrPath, Major: unix.Major(sys.Rdev), Minor: unix.Minor(sys.Rdev),
		Mode: uint32(st.Mode().Perm()), UID: sys.Uid, GID: sys.Gid,
	}, nil
}

// unwrapPathError drops the *PathError's operation and path, which the
// message already names, as dockerd's "no such file or directory" does.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
