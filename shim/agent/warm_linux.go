//go:build linux

package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/husk-vm/husk/shim/proto"
)

// warmArg0 is the argv[0] of the warm-up's program: the agent's own
// binary, which exits at once when started under this name (Reexec).
const warmArg0 = "husk-agent-warm"

// diskReleaser is a Rootfs whose disks can be let go in the guest before
// the host unplugs them (GuestRootfs).
type diskReleaser interface {
	ReleaseDisks(serials ...string) error
}

// warm runs a throwaway container on spec's disks and undoes it
// (proto.OpWarm). It refuses a guest that is set up or warming: the
// throwaway root must never be mistaken for a container's.
func (a *Agent) warm(ctx context.Context, spec proto.WarmSpec) (err error) {
	if spec.BaseSerial == "" || spec.UpperSerial == "" {
		return &agentError{proto.KindInvalid, "warm: missing disk serials"}
	}
	a.mu.Lock()
	busy := a.root != "" || a.warming
	a.warming = !busy
	a.mu.Unlock()
	if busy {
		return &agentError{proto.KindInvalid, "warm: the guest is set up or warming"}
	}
	defer func() {
		a.mu.Lock()
		a.warming = false
		a.mu.Unlock()
	}()
	if a.opts.WarmNetwork != nil {
		if err := a.opts.WarmNetwork(ctx); err != nil {
			return fmt.Errorf("warm: %w", err)
		}
	}
	root, err := a.opts.Rootfs.Mount(ctx, proto.SetupSpec{BaseSerial: spec.BaseSerial, UpperSerial: spec.UpperSerial})
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	defer func() {
		if uerr := a.opts.Rootfs.Unmount(ctx); uerr != nil {
			err = errors.Join(err, fmt.Errorf("warm: %w", uerr))
			return
		}
		if r, ok := a.opts.Rootfs.(diskReleaser); ok {
			if rerr := r.ReleaseDisks(spec.BaseSerial, spec.UpperSerial); rerr != nil {
				err = errors.Join(err, fmt.Errorf("warm: %w", rerr))
			}
		}
	}()
	// The program is the init's own binary, reached through the child's
	// /proc (mounted in the throwaway root), since the blank disks hold
	// none: the C init, which exits at once under cinitWarmArg0, or the
	// agent under warmArg0. A dynamically linked agent (a test binary)
	// would not find its loader in that root: its init stops short of
	// the exec instead.
	cfg := initConfig{Root: root, Mounts: true, Process: proto.ProcessSpec{Args: []string{warmArg0}}, Exe: "/proc/self/exe"}
	if a.opts.InitExe != "" {
		cfg.Process.Args = []string{cinitWarmArg0}
	} else if static, err := isStatic("/proc/self/exe"); err != nil || !static {
		cfg.Exe, cfg.NoExec = "", true
	}
	p, err := a.spawn("warm", cfg, 0, "")
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	select {
	case <-p.exited:
	case <-ctx.Done():
		_ = p.osProc.Kill()
		<-p.exited
	}
	p.release()
	if ctx.Err() != nil {
		return fmt.Errorf("warm: %w", ctx.Err())
	}
	if p.status.Code != 0 {
		return fmt.Errorf("warm: the program exited with %d", p.status.Code)
	}
	return nil
}

// isStatic tells whether the ELF file at path has no program interpreter.
// It reads the program headers itself rather than through debug/elf, which
// would link debug/dwarf and compress/zlib into the agent: every main
// process the agent starts is the agent's binary re-executed, and under
// TCG the package initialisers of those (debug/dwarf's alone ~250
// translation blocks) cost each container started from a template their
// translation.
func isStatic(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var hdr [64]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return false, fmt.Errorf("read ELF header of %s: %w", path, err)
	}
	// Only 64-bit little-endian ELF files: the agent's own kind.
	if string(hdr[:4]) != "\x7fELF" || hdr[4] != 2 || hdr[5] != 1 {
		return false, fmt.Errorf("%s: not a 64-bit little-endian ELF file", path)
	}
	phoff := binary.LittleEndian.Uint64(hdr[32:])
	phentsize := int64(binary.LittleEndian.Uint16(hdr[54:]))
	phnum := int64(binary.LittleEndian.Uint16(hdr[56:]))
	if phentsize < 4 {
		return false, fmt.Errorf("%s: program header entries of %d bytes", path, phentsize)
	}
	const ptInterp = 3
	var typ [4]byte
	for i := int64(0); i < phnum; i++ {
		if _, err := f.ReadAt(typ[:], int64(phoff)+i*phentsize); err != nil {
			return false, fmt.Errorf("read program header %d of %s: %w", i, path, err)
		}
		if binary.LittleEndian.Uint32(typ[:]) == ptInterp {
			return false, nil
		}
	}
	return true, nil
}

// ReleaseDisks deletes the SCSI devices of the disks with these serials,
// so that the guest has forgotten them before the host unplugs them. A
// disk without a SCSI device (virtio-blk) is left alone, and so is a
// removable one: the host only takes its medium out, and the device
// stays for the next (vmm.Disk.Removable).
func (g *GuestRootfs) ReleaseDisks(serials ...string) error {
	var errs []error
	for _, s := range serials {
		dev := diskBySerial("/sys/block", s)
		if dev == "" || isRemovable("/sys/block", dev) {
			continue
		}
		del := filepath.Join("/sys/block", dev, "device", "delete")
		if _, err := os.Stat(del); err != nil {
			continue
		}
		if err := os.WriteFile(del, []byte("1"), 0o200); err != nil {
			errs = append(errs, fmt.Errorf("delete disk %s: %w", dev, err))
		}
	}
	return errors.Join(errs...)
}
