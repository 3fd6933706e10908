package cloudhypervisor

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
)

// Disk hot-plug through vm.add-disk and vm.remove-device, for VMs
// restored from a template (which has no disks). cloud-hypervisor plugs
// each as a virtio-blk PCI device, which the guest learns of through ACPI
// and which shows its serial in /sys/block/*/serial, as a disk given at
// boot does. As with NICs, the VM's config (vm.info) is the record: a
// snapshot taken later lists the hot-plugged disks after the boot ones,
// which is the order Config.Disks gives at restore.

// AttachDisks hot-plugs disks into the running VM, in order, after those
// it has. On error the VM may hold some of the disks; callers discard it.
func (m *Machine) AttachDisks(ctx context.Context, disks []vmm.Disk) error {
	if err := m.running("hot-plug disks"); err != nil {
		return err
	}
	info, err := m.Info(ctx)
	if err != nil {
		return fmt.Errorf("hot-plug disks: %w", err)
	}
	ids := deviceIDs(&info.Config)
	for _, d := range disks {
		if len(d.Serial) > maxSerial {
			return fmt.Errorf("hot-plug disk %s: serial longer than %d bytes: %w", d.Serial, maxSerial, errdefs.ErrInvalidArgument)
		}
		path, err := filepath.Abs(d.Path)
		if err != nil {
			return fmt.Errorf("hot-plug disk %s: %w", d.Serial, err)
		}
		id := freeID(ids, "disk")
		if err := m.api.put(ctx, "vm.add-disk", &DiskConfig{Path: path, Readonly: d.ReadOnly, Serial: d.Serial, ID: id}); err != nil {
			return fmt.Errorf("hot-plug disk %s: %w", d.Serial, err)
		}
		ids = append(ids, id)
		m.log.Debug("disk hot-plugged", "serial", d.Serial, "id", id)
	}
	return nil
}

// DetachDisks unplugs the VM's last n disks, last first, undoing
// AttachDisks. The guest should have let them go first. On error the VM
// may hold some of the disks; callers discard it.
func (m *Machine) DetachDisks(ctx context.Context, n int) error {
	if err := m.running("unplug disks"); err != nil {
		return err
	}
	info, err := m.Info(ctx)
	if err != nil {
		return fmt.Errorf("unplug disks: %w", err)
	}
	have := info.Config.Disks
	if n < 0 || n > len(have) {
		return fmt.Errorf("unplug %d disks: the VM has %d: %w", n, len(have), errdefs.ErrInvalidArgument)
	}
	for i := len(have) - 1; i >= len(have)-n; i-- {
		id := have[i].ID
		if id == "" {
			return fmt.Errorf("unplug disk %s: cloud-hypervisor reports no device id for it: %w", have[i].Path, errdefs.ErrInternal)
		}
		if err := m.api.put(ctx, "vm.remove-device", &VmRemoveDevice{ID: id}); err != nil {
			return fmt.Errorf("unplug disk %s: %w", id, err)
		}
	}
	return nil
}

// deviceIDs lists the ids of the VM's disks and NICs, which share one
// namespace in cloud-hypervisor.
func deviceIDs(vc *VmConfig) []string {
	var ids []string
	for _, d := range vc.Disks {
		ids = append(ids, d.ID)
	}
	for _, n := range vc.Net {
		ids = append(ids, n.ID)
	}
	return ids
}

// freeID is the lowest "<prefix><N>" not in ids.
func freeID(ids []string, prefix string) string {
	for i := 0; ; i++ {
		if c := fmt.Sprintf("%s%d", prefix, i); !slices.Contains(ids, c) {
			return c
		}
	}
}
