package pool

import (
	"context"
	"fmt"
	"time"

	"github.com/husk-vm/husk/runtime/templates"
)

// warm runs templates.Warm in a freshly restored pooled VM before it is
// paused. Its template was warmed before its snapshot, but TCG's
// translation cache is not in a snapshot: measured on the 2-core
// development host, a container's first start in a pooled VM spent
// ~300 ms in the guest's setup (SCSI probe, ext4 and overlay mounts) and
// ~180 ms starting the process, where a VM that had run that code before
// takes a fraction of it. The warm-up moves that cost to the refill,
// which no `docker run` waits for.
func (p *Pool) warm(ctx context.Context, e *entry) error {
	t0 := time.Now()
	st, err := templates.Warm(ctx, templates.Warmup{
		Machine: e.vm.Machine.(handover), // restore checked it
		Client:  e.vm.Client, Dir: e.dir, Disks: p.opts.Disks, DiskSize: p.opts.WarmDiskSize, Serial: e.id, Slots: e.vm.Slots,
	})
	if err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	p.log.Debug("pool VM warmed", "vm", e.id, "disks", st.Disks, "hotplug", st.Hotplug,
		"warm", st.Warm, "unplug", st.Unplug, "took", time.Since(t0))
	return nil
}
