//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/husk-vm/husk/shim/proto"
)

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
	// The program is the C init's own binary, reached through the child's
	// /proc (mounted in the throwaway root), since the blank disks hold
	// none; it exits at once under cinitWarmArg0.
	cfg := initConfig{Root: root, Mounts: true, Process: proto.ProcessSpec{Args: []string{cinitWarmArg0}}, Exe: "/proc/self/exe"}
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
