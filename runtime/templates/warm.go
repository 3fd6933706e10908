package templates

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// warmTimeout bounds a warm-up (about a second on the 2-core development
// host), so that a guest that hangs in it costs one VM, not its caller.
const warmTimeout = time.Minute

// Disks makes the blank disks a warm-up mounts (*rootfs.Store).
type Disks interface {
	NewUpper(ctx context.Context, path string, size int64) error
}

// DiskPlugger is what a warm-up needs of a machine: disks plugged and
// unplugged while it runs (qemu.Machine, cloudhypervisor.Machine).
type DiskPlugger interface {
	DiskAttacher
	DetachDisks(ctx context.Context, n int) error
}

// Warmup describes one warm-up (Warm).
type Warmup struct {
	Machine DiskPlugger
	Client  *host.Client
	// Dir holds the blank disks while the warm-up runs.
	Dir   string
	Disks Disks
	// DiskSize is the apparent size of the blank disks.
	DiskSize int64
	// Serial tells this warm-up's disks from any other's.
	Serial string
	// Slots are the VM's empty removable disks (Options.Slots). The
	// warm-up's disks take their serials, so that they go in as media as
	// a container's will.
	Slots []vmm.Disk
}

// WarmStages are the times Warm took, for debug logs.
type WarmStages struct {
	Disks, Hotplug, Warm, Unplug time.Duration
}

// Warm runs a throwaway container in a running guest (proto.OpWarm): two
// blank disks are hot-plugged, the agent mounts them as a container root,
// runs a program in new namespaces under it, puts its NICs through the
// network setup and back and lets everything go, and the disks are
// unplugged again. Afterwards the guest's devices are as before (same
// SCSI targets, same layout), so a container's disks land where a
// template restore puts them.
//
// It is run twice over, for different reasons. A template is warmed
// before it is snapshotted: what a guest kernel and agent do only once
// (the slab caches, workqueue threads and block-layer state the first
// SCSI disk creates, ext4's and overlayfs's first mounts, the agent's
// encoders for its types) is then in the snapshot, and no restore does it
// again. A pooled VM is warmed again after its restore, for TCG: a
// restored VM starts with an empty translation cache, which is not part
// of a snapshot but lives as long as the QEMU process, so running the
// code once before a take moves its translation to the refill.
func Warm(ctx context.Context, w Warmup) (_ WarmStages, err error) {
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	var st WarmStages
	t0 := time.Now()
	base, upper := warmSerials(w.Slots, w.Serial)
	disks := []vmm.Disk{
		{Path: filepath.Join(w.Dir, "warm-base.ext4"), ReadOnly: true, Serial: base},
		{Path: filepath.Join(w.Dir, "warm-upper.ext4"), Serial: upper},
	}
	defer func() {
		for _, d := range disks {
			if rerr := os.Remove(d.Path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("remove warm-up disk: %w", rerr))
			}
		}
	}()
	for _, d := range disks {
		if err := w.Disks.NewUpper(ctx, d.Path, w.DiskSize); err != nil {
			return st, fmt.Errorf("warm-up disk: %w", err)
		}
	}
	t1 := time.Now()
	st.Disks = t1.Sub(t0)
	if err := w.Machine.AttachDisks(ctx, disks); err != nil {
		return st, fmt.Errorf("warm-up: %w", err)
	}
	t2 := time.Now()
	st.Hotplug = t2.Sub(t1)
	if err := w.Client.Warm(ctx, proto.WarmSpec{BaseSerial: disks[0].Serial, UpperSerial: disks[1].Serial}); err != nil {
		return st, fmt.Errorf("warm-up: %w", err)
	}
	t3 := time.Now()
	st.Warm = t3.Sub(t2)
	if err := w.Machine.DetachDisks(ctx, len(disks)); err != nil {
		return st, fmt.Errorf("warm-up: %w", err)
	}
	st.Unplug = time.Since(t3)
	return st, nil
}

// warmSerials are the serials of a warm-up's base and upper disks: those
// of a read-only and a writable slot when the VM has them, else serials
// of their own, which no container's disk has.
func warmSerials(slots []vmm.Disk, suffix string) (base, upper string) {
	for _, s := range slots {
		switch {
		case s.ReadOnly && base == "":
			base = s.Serial
		case !s.ReadOnly && upper == "":
			upper = s.Serial
		}
	}
	if base == "" || upper == "" {
		return "warmb" + suffix, "warmu" + suffix
	}
	return base, upper
}
