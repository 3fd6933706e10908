// Package kernel finds and checks the guest kernel and builds the initramfs
// every husk VM boots with: the agent as /init plus the kernel modules the
// guest needs for its virtio devices, overlayfs and vsock.
//
// The initramfs is a newc cpio archive written with
// github.com/cavaliergopher/cpio. Module dependencies are resolved from the
// kernel's own modules.dep and modules.builtin text files rather than by
// running depmod/modprobe: those files are a stable, documented format, and
// reading them keeps the build free of host tools and of the host's
// /etc/modprobe.d policy.
package kernel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Kernel is a bootable x86 bzImage and the modules built for it.
type Kernel struct {
	// Path is the bzImage.
	Path string
	// Version is what uname -r reports inside the guest.
	Version string
	// ModulesDir is /lib/modules/<Version> (holds modules.dep).
	ModulesDir string
}

// BootArgs go on every husk guest's kernel command line, whatever its
// VMM. cryptomgr.notests skips the self-tests the crypto manager runs
// on every algorithm as it registers, against test vectors: under TCG,
// where they run emulated, they cost a cold boot ~0.3 s (interleaved
// cold `docker run --rm true`, n=6: 2.59 s with them, 2.31 s without;
// issue 8). They check the
// CPU's and the kernel's implementations, not the guest's data, and FIPS
// mode (fips=1) runs them regardless. Kata Containers boots its guests
// with the same option.
//
// lsm= leaves out AppArmor, TOMOYO, Yama and the integrity modules, which
// Debian's kernel enables by default: no guest loads a policy for any of
// them, so each only runs its hooks on every open, exec, mount and socket
// for nothing, and under TCG their code is translated afresh in every
// container started from a template (~1,200 of its ~58,000 translation
// blocks). Containers see the same modules as under this host's dockerd,
// whose kernel has lockdown, capability, landlock and bpf; capability is
// always on.
//
// no_timer_check skips the boot's test of the IO-APIC timer, which
// counts the timer interrupts a busy-wait sees: on a loaded host a vCPU
// is descheduled in that window, the test fails falsely, and the kernel
// rewires its timer through the 8259A ("MP-BIOS bug: 8254 timer not
// connected to IO-APIC", 11 of 30 cold boots ten at a time on 2 cores)
// or panics ("IO-APIC + timer doesn't work!", a `docker run` lost in a
// bench's ten concurrent cold starts). A VMM's emulated timer works;
// Kata Containers boots its guests with the same option.
const BootArgs = "cryptomgr.notests lsm=lockdown,landlock,bpf no_timer_check"

// modulesRoot is where distributions install modules; Find looks for
// <modulesRoot>/<Version>.
const modulesRoot = "/lib/modules"

// Find checks the kernel image at path and locates its modules. An empty
// path picks the newest /boot/vmlinuz-* by version order.
func Find(path string) (Kernel, error) {
	return find(path, "/boot", modulesRoot)
}

func find(path, bootDir, modRoot string) (Kernel, error) {
	if path == "" {
		p, err := newestImage(bootDir)
		if err != nil {
			return Kernel{}, err
		}
		path = p
	}
	f, err := os.Open(path)
	if err != nil {
		return Kernel{}, fmt.Errorf("open kernel image: %w", err)
	}
	defer f.Close()
	version, err := bzImageVersion(f)
	if err != nil {
		return Kernel{}, fmt.Errorf("kernel image %s: %w", path, err)
	}
	dir := filepath.Join(modRoot, version)
	if _, err := os.Stat(filepath.Join(dir, "modules.dep")); err != nil {
		// A kernel built from kernel/guest.config has everything the
		// guest needs built in, and no modules to go with it.
		if _, derr := os.Stat(dir); errors.Is(derr, os.ErrNotExist) && monolithic(path) {
			return Kernel{Path: path, Version: version}, nil
		}
		return Kernel{}, fmt.Errorf("modules for kernel %s: %w", version, err)
	}
	return Kernel{Path: path, Version: version, ModulesDir: dir}, nil
}

// newestImage returns the vmlinuz-* in dir with the highest version.
func newestImage(dir string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "vmlinuz-*"))
	if err != nil {
		return "", fmt.Errorf("list kernels in %s: %w", dir, err)
	}
	if len(matches) == 0 {
		return "", fmt.Errorf("no vmlinuz-* in %s", dir)
	}
	slices.SortFunc(matches, func(a, b string) int {
		return compareVersions(strings.TrimPrefix(filepath.Base(a), "vmlinuz-"),
			strings.TrimPrefix(filepath.Base(b), "vmlinuz-"))
	})
	return matches[len(matches)-1], nil
}

// compareVersions orders kernel release strings the way sort -V does for
// the common cases: runs of digits compare numerically, everything else
// byte-wise. So 6.1.0-10 sorts after 6.1.0-9 and 6.10 after 6.9.
func compareVersions(a, b string) int {
	for a != "" && b != "" {
		da, ra := splitRun(a)
		db, rb := splitRun(b)
		if isDigit(da[0]) && isDigit(db[0]) {
			na, _ := strconv.ParseUint(da, 10, 64)
			nb, _ := strconv.ParseUint(db, 10, 64)
			if na != nb {
				if na < nb {
					return -1
				}
				return 1
			}
		} else if c := strings.Compare(da, db); c != 0 {
			return c
		}
		a, b = ra, rb
	}
	return strings.Compare(a, b)
}

// splitRun splits s after its leading run of digits or non-digits.
func splitRun(s string) (run, rest string) {
	d := isDigit(s[0])
	i := 1
	for i < len(s) && isDigit(s[i]) == d {
		i++
	}
	return s[:i], s[i:]
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// Offsets in the x86 boot protocol header (Documentation/arch/x86/boot.rst).
const (
	offBootFlag      = 0x1fe // 0xAA55
	offHeaderMagic   = 0x202 // "HdrS"
	offProtocol      = 0x206 // boot protocol version
	offKernelVersion = 0x20e // pointer to the version string, minus 0x200
	setupHeaderEnd   = 0x268
)

// errNotBzImage is returned for files that are not x86 bzImages.
var errNotBzImage = errors.New("not an x86 bzImage")

// bzImageVersion checks the boot header of r and returns the kernel release
// (the first word of the embedded version string, which is what uname -r
// reports).
func bzImageVersion(r io.ReaderAt) (string, error) {
	hdr := make([]byte, setupHeaderEnd)
	if _, err := r.ReadAt(hdr, 0); err != nil {
		return "", fmt.Errorf("read boot header: %w", err)
	}
	if binary.LittleEndian.Uint16(hdr[offBootFlag:]) != 0xaa55 ||
		string(hdr[offHeaderMagic:offHeaderMagic+4]) != "HdrS" {
		return "", errNotBzImage
	}
	// The kernel_version field exists from protocol 2.00 on; every kernel
	// this century is far newer, so older is treated as corrupt.
	if proto := binary.LittleEndian.Uint16(hdr[offProtocol:]); proto < 0x200 {
		return "", fmt.Errorf("boot protocol %#x too old: %w", proto, errNotBzImage)
	}
	ptr := binary.LittleEndian.Uint16(hdr[offKernelVersion:])
	if ptr == 0 {
		return "", fmt.Errorf("no kernel version string: %w", errNotBzImage)
	}
	buf := make([]byte, 256)
	n, err := r.ReadAt(buf, int64(ptr)+0x200)
	if n == 0 && err != nil {
		return "", fmt.Errorf("read kernel version string: %w", err)
	}
	buf = buf[:n]
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	fields := strings.Fields(string(buf))
	if len(fields) == 0 {
		return "", fmt.Errorf("empty kernel version string: %w", errNotBzImage)
	}
	return fields[0], nil
}

// monolithic reports whether the kernel image at path was built without
// modules, which `make kernel` marks with a file beside it:
// <path>.monolithic. A bzImage does not say whether it loads modules, and
// a distribution kernel found without its modules must still be refused.
func monolithic(path string) bool {
	_, err := os.Stat(path + ".monolithic")
	return err == nil
}
