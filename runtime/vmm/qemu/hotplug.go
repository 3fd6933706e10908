package qemu

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
)

// PCI slots on the pc machine. Every device has a fixed slot so that a
// disk hot-plugged into a VM restored from a template lands where a VM
// started with that disk has it: a snapshot of either then restores into
// the other, because QEMU names each device's migration state by its PCI
// address (and a SCSI disk's by its controller's address and its target).
const (
	// pciSlotPlan versions the plan below; snapshots record it, and the
	// driver's Version names it. Plan 1 had virtio-blk disks in slots
	// 0x10-0x1f; plan 2 has them on the virtio-scsi controller; plan 3
	// has NICs without an option ROM (the ROM is migrated state).
	pciSlotPlan  = 3
	serialSlot   = 0x03
	firstNetSlot = 0x04
	maxNets      = 12 // slots 0x04-0x0f
	// scsiSlot holds the virtio-scsi controller every pc VM has, disks or
	// not, so a template (diskless) and a cold-booted VM have the same
	// devices. Its disks are targets 0 to maxDisks-1, LUN 0.
	scsiSlot = 0x10
	maxDisks = 16
	// Shares (virtio-fs) sit behind a PCI bridge in slot 2, one per
	// bridge slot: there is no room for them on the root bus, and they are
	// never hot-plugged (a VM with shares boots cold).
	shareBridgeSlot = 0x02
	maxShares       = 31 // bridge slots 0x01-0x1f
)

// scsiBus is the bus of the virtio-scsi controller's disks.
const scsiBus = "scsi0.0"

// The i-th disk's block node, device and fd set, at boot and on hot-plug.
func diskNode(i int) string   { return fmt.Sprintf("disk%d", i) }
func diskDevice(i int) string { return "v" + diskNode(i) }
func diskFdSet(i int) int     { return i + 1 }

// slotOpt is the ",addr=" option that pins a device to slot, on machines
// with PCI.
func slotOpt(machine string, slot int) string {
	if machine != MachinePC {
		return ""
	}
	return fmt.Sprintf(",addr=0x%x", slot)
}

// AttachDisks hot-plugs disks into the running VM as SCSI disks on its
// virtio-scsi controller, after those it has, at the targets a VM
// started with all of them would use. The guest learns of each from a
// virtio-scsi event and probes it at once; virtio-blk disks would each be
// a PCI hot-plug, which the guest handles through ACPI: under TCG that
// took 0.4-0.5 s for two disks, most of it interpreting AML and routing
// interrupts. The disks join the VM's layout, so a snapshot taken later
// restores into a VM started with them. Only the pc machine has
// hot-plug: elsewhere this fails with errdefs.ErrNotImplemented. On error
// the VM may hold some of the disks; callers discard it.
//
// As at start, QEMU gets descriptors, never paths: each disk's fd set is
// filled over QMP (add-fd with SCM_RIGHTS) and the block node opens
// /dev/fdset/N.
func (m *Machine) AttachDisks(ctx context.Context, disks []vmm.Disk) error {
	l, err := m.pciLayout("hot-plug into")
	if err != nil {
		return err
	}
	if len(l.Disks)+len(disks) > maxDisks {
		return fmt.Errorf("hot-plug into qemu %d: more than %d disks: %w", m.pid, maxDisks, errdefs.ErrInvalidArgument)
	}
	q, err := m.QMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	next := *l
	next.Disks = append([]layoutDisk(nil), l.Disks...)
	for _, d := range disks {
		i := len(next.Disks)
		if err := attachDisk(ctx, q, i, d); err != nil {
			return fmt.Errorf("hot-plug disk %s into qemu %d: %w", d.Serial, m.pid, err)
		}
		next.Disks = append(next.Disks, layoutDisk{ReadOnly: d.ReadOnly, Serial: d.Serial})
	}
	return m.setLayout(&next)
}

// DetachDisks unplugs the VM's last n disks, undoing AttachDisks: each
// SCSI device, its block node and its fd set go, last first, and the
// layout no longer has them, so the names and targets are free for the
// next AttachDisks. The guest should have let the disks go first (a SCSI
// unplug is a surprise removal). On error the VM may hold some of the
// disks; callers discard it.
func (m *Machine) DetachDisks(ctx context.Context, n int) error {
	l, err := m.pciLayout("unplug disks from")
	if err != nil {
		return err
	}
	if n < 0 || n > len(l.Disks) {
		return fmt.Errorf("unplug %d disks from qemu %d: it has %d: %w", n, m.pid, len(l.Disks), errdefs.ErrInvalidArgument)
	}
	q, err := m.QMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	next := *l
	next.Disks = slices.Clone(l.Disks)
	for range n {
		i := len(next.Disks) - 1
		if err := detachDisk(ctx, q, i); err != nil {
			return fmt.Errorf("unplug disk %s from qemu %d: %w", next.Disks[i].Serial, m.pid, err)
		}
		next.Disks = next.Disks[:i]
	}
	return m.setLayout(&next)
}

// detachDisk undoes attachDisk(i).
func detachDisk(ctx context.Context, q *QMP, i int) error {
	if err := deleteDevice(ctx, q, diskDevice(i)); err != nil {
		return err
	}
	if err := q.Execute(ctx, "blockdev-del", map[string]any{"node-name": diskNode(i)}, nil); err != nil {
		return err
	}
	return q.Execute(ctx, "remove-fd", map[string]any{"fdset-id": diskFdSet(i)}, nil)
}

// attachDisk plugs disk d as the VM's i-th disk, named as qemuArgs names
// it (fd set i+1, node disk<i>).
func attachDisk(ctx context.Context, q *QMP, i int, d vmm.Disk) error {
	if d.Path == "" || len(d.Serial) > maxSerial {
		return fmt.Errorf("bad disk %+v: %w", d, errdefs.ErrInvalidArgument)
	}
	set := diskFdSet(i)
	for _, mode := range diskModes(d) {
		f, err := os.OpenFile(d.Path, mode, 0)
		if err != nil {
			return fmt.Errorf("open disk: %w", err)
		}
		err = q.ExecuteWithFile(ctx, "add-fd", map[string]any{"fdset-id": set}, nil, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	node := diskNode(i)
	err := q.Execute(ctx, "blockdev-add", map[string]any{
		"driver": "raw", "node-name": node, "read-only": d.ReadOnly,
		"file": map[string]any{"driver": "file", "filename": fmt.Sprintf("/dev/fdset/%d", set), "locking": "off"},
	}, nil)
	if err != nil {
		return err
	}
	// write-cache on is what -drive's default cache=writeback gives a
	// device started with the disk.
	return q.Execute(ctx, "device_add", map[string]any{
		"driver": "scsi-hd", "id": diskDevice(i), "drive": node, "serial": d.Serial,
		"bus": scsiBus, "channel": 0, "scsi-id": i, "lun": 0, "write-cache": "on",
	}, nil)
}
