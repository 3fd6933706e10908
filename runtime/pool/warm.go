package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/proto"
)

// warmTimeout bounds a warm-up (about a second on the 2-core development
// host), so that a guest that hangs in it costs the filler one VM, not
// the pool.
const warmTimeout = time.Minute

// warm runs a throwaway container in a freshly restored pooled VM before
// it is paused (proto.OpWarm): two blank disks are hot-plugged, the agent
// mounts them as a container root, runs a program in new namespaces under
// it and lets everything go, and the disks are unplugged again.
//
// Why: under TCG a restored VM starts with an empty translation cache,
// which is not part of a snapshot but lives as long as the QEMU process.
// Measured on the 2-core development host, a container's first start in a
// pooled VM spent ~300 ms in the guest's setup (SCSI probe, ext4 and
// overlay mounts) and ~180 ms starting the process, where a VM that had
// run that code before takes a fraction of it. The warm-up moves that
// cost to the refill, which no `docker run` waits for. The VM's devices
// afterwards are the template's again (same SCSI targets, same layout),
// so the container's disks land where a template restore puts them.
func (p *Pool) warm(ctx context.Context, e *entry) (err error) {
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	t0 := time.Now()
	h := e.vm.Machine.(handover) // restore checked it
	disks := []vmm.Disk{
		{Path: filepath.Join(e.dir, "warm-base.ext4"), ReadOnly: true, Serial: "warmb" + e.id},
		{Path: filepath.Join(e.dir, "warm-upper.ext4"), Serial: "warmu" + e.id},
	}
	defer func() {
		for _, d := range disks {
			if rerr := os.Remove(d.Path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("pool: remove warm-up disk: %w", rerr))
			}
		}
	}()
	for _, d := range disks {
		if err := p.opts.Disks.NewUpper(ctx, d.Path, p.opts.WarmDiskSize); err != nil {
			return fmt.Errorf("pool: warm-up disk: %w", err)
		}
	}
	made := time.Now()
	if err := h.AttachDisks(ctx, disks); err != nil {
		return fmt.Errorf("pool: warm-up: %w", err)
	}
	attached := time.Now()
	if err := e.vm.Client.Warm(ctx, proto.WarmSpec{BaseSerial: disks[0].Serial, UpperSerial: disks[1].Serial}); err != nil {
		return fmt.Errorf("pool: warm-up: %w", err)
	}
	warmed := time.Now()
	if err := h.DetachDisks(ctx, len(disks)); err != nil {
		return fmt.Errorf("pool: warm-up: %w", err)
	}
	p.log.Debug("pool VM warmed", "vm", e.id, "disks", made.Sub(t0), "hotplug", attached.Sub(made),
		"warm", warmed.Sub(attached), "unplug", time.Since(warmed), "took", time.Since(t0))
	return nil
}
