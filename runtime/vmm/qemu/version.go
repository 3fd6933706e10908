package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// fileID identifies a file the driver derives something from once (a
// kernel's boot file, the binary's version). A package upgrade renames a
// new file into place, which changes its inode and its times, so a
// replaced file never matches an old fileID.
type fileID struct {
	path       string
	dev, ino   uint64
	size       int64
	mtim, ctim syscall.Timespec
}

func statFile(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("stat %s: no inode", path)
	}
	return fileID{path: path, dev: st.Dev, ino: st.Ino, size: st.Size, mtim: st.Mtim, ctim: st.Ctim}, nil
}

// Version implements vmm.Driver: the first line of `qemu --version`, with
// the device plan.
//
// Templates and checkpoints compare it on every start and restore, and
// QEMU takes ~30 ms to print it (its dynamic linking of ~50 libraries,
// as for every launch), which a template start used to wait for. So it
// is asked once per binary file: again only when the name resolves to
// another file, or the file changes.
func (d *Driver) Version(ctx context.Context) (string, error) {
	path, err := exec.LookPath(d.binary)
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", d.binary, err)
	}
	bin, err := statFile(path)
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", d.binary, err)
	}
	d.versionMu.Lock()
	defer d.versionMu.Unlock()
	if d.version != "" && d.versionOf == bin {
		return d.version, nil
	}
	out, err := exec.CommandContext(ctx, bin.path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", d.binary, err)
	}
	d.versionOf, d.version = bin, parseVersion(string(out))
	return d.version, nil
}

// parseVersion turns the first line of `qemu --version`, "QEMU emulator
// version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u16)", into "qemu 7.2.19
// (devices vN)". The device plan is part of the version: snapshots
// (templates and checkpoints) restore only into VMs with the same
// devices, so a new plan must not be handed the old ones.
func parseVersion(out string) string {
	line, _, _ := strings.Cut(out, "\n")
	if f := strings.Fields(line); len(f) >= 4 && f[1] == "emulator" {
		return fmt.Sprintf("qemu %s (devices v%d)", f[3], pciSlotPlan)
	}
	return fmt.Sprintf("%s (devices v%d)", strings.TrimSpace(line), pciSlotPlan)
}
