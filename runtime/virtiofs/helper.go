package virtiofs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Reexec must run first in main (and TestMain) of any binary that starts
// shares. In the helper it prepares the staging mount and execs
// virtiofsd, never returning; elsewhere it returns at once.
//
// The helper's command line is:
//
//	husk-virtiofsd-helper VIRTIOFSD SOURCE STAGING dir|file ro|rw -- ARGS...
//
// It runs in a private mount namespace of its own (Start asks for one).
func Reexec() {
	if len(os.Args) == 0 || os.Args[0] != helperArg0 {
		return
	}
	if err := helper(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "husk virtiofsd helper:", err)
		os.Exit(1)
	}
}

func helper(args []string) error {
	if len(args) < 6 || args[5] != "--" {
		return fmt.Errorf("usage: %s VIRTIOFSD SOURCE STAGING dir|file ro|rw -- ARGS", helperArg0)
	}
	binary, source, staging, kind, mode := args[0], args[1], args[2], args[3], args[4]
	if err := stage(source, staging, kind == "file", mode == "ro"); err != nil {
		return err
	}
	argv := append([]string{binary}, args[6:]...)
	if err := unix.Exec(binary, argv, os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", binary, err)
	}
	return nil
}

// stage puts source at staging: a directory is bound onto it; a file is
// bound onto staging/FileName in a tmpfs that is then made read-only, so
// the guest can neither add files beside it nor reach its host siblings.
func stage(source, staging string, file, readOnly bool) error {
	// Belt and braces: Start's namespace is already private, but a
	// mount here must never propagate to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	target := staging
	if file {
		if err := unix.Mount("tmpfs", staging, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=16k"); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", staging, err)
		}
		target = filepath.Join(staging, FileName)
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("create %s: %w", target, err)
		}
		f.Close()
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", source, target, err)
	}
	if readOnly {
		if err := makeReadOnly(target); err != nil {
			return err
		}
	}
	if file {
		if err := unix.Mount("", staging, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=16k"); err != nil {
			return fmt.Errorf("make %s read-only: %w", staging, err)
		}
	}
	return nil
}

// makeReadOnly makes the mount at path and every mount under it
// read-only. A remount of a bind mount would only cover the top one.
func makeReadOnly(path string) error {
	err := unix.MountSetattr(unix.AT_FDCWD, path, unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW,
		&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("make %s read-only: %w", path, err)
	}
	// Kernels before 5.12: the top mount only, as dockerd does there.
	if err := unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", path, err)
	}
	return nil
}
