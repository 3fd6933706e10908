package qemu

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
)

// PCI slots on the Q35 machine. Every device has a fixed slot so that a
// disk hot-plugged into a VM restored from a template lands where a VM
// started with that disk has it: a snapshot of either then restores into
// the other, because QEMU names each device's migration state by its PCI
// address (and a SCSI disk's by its controller's address and its target).
const (
	// pciSlotPlan versions the plan below; snapshots record it, and the
	// driver's Version names it. Plan 1 had virtio-blk disks in slots
	// 0x10-0x1f; plan 2 has them on the virtio-scsi controller; plan 3
	// has NICs without an option ROM (the ROM is migrated state); plan 4
	// has a virtio-serial controller of serialPorts ports (its port count
	// is migrated state); plan 5 is on Q35 (plans 1-4 were on the i440fx
	// pc), with its NICs behind a PCI bridge.
	pciSlotPlan = 5
	serialSlot  = 0x03
	// NICs sit behind a PCI bridge in nicBridgeSlot, NIC slot i in bridge
	// slot i+1: Q35's root bus has no hot-plug, and the bridge's slots do
	// (through ACPI, like the pc's root bus had). Every VM has the bridge,
	// NICs or not, so that a NIC can be hot-plugged into any of them.
	nicBridgeSlot = 0x04
	maxNets       = 12
	// scsiSlot holds the virtio-scsi controller every Q35 VM has, disks or
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

// nicBridge is the id of the PCI bridge the NICs sit behind.
const nicBridge = "nicbridge"

// nicAddr is NIC slot i's address behind nicBridge.
func nicAddr(i int) string { return fmt.Sprintf("0x%x", i+1) }

// nicSlotOpt pins NIC slot i to its place behind nicBridge, on machines
// with PCI.
func nicSlotOpt(machine string, i int) string {
	if machine != MachineQ35 {
		return ""
	}
	return ",bus=" + nicBridge + ",addr=" + nicAddr(i)
}

// slotOpt is the ",addr=" option that pins a device to slot, on machines
// with PCI.
func slotOpt(machine string, slot int) string {
	if machine != MachineQ35 {
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
// restores into a VM started with them. Only the Q35 machine has
// hot-plug: elsewhere this fails with errdefs.ErrNotImplemented. On error
// the VM may hold some of the disks; callers discard it.
//
// A disk whose serial and access match an empty removable disk of the VM
// (vmm.Disk.Removable) is inserted into it as its medium instead: the
// guest keeps the device it probed at boot and reads the new medium's
// capacity, dropping what it cached of the old one, when it next opens
// it. Under TCG that saved a guest mounting a base and an upper ~2,000 of
// ~9,100 translated blocks and 150-550 ms against a hot-plug, which is
// probed.
//
// As at start, QEMU gets descriptors, never paths: each disk's fd set is
// filled over QMP (add-fd with SCM_RIGHTS) and the block node opens
// /dev/fdset/N.
func (m *Machine) AttachDisks(ctx context.Context, disks []vmm.Disk) error {
	l, err := m.pciLayout("hot-plug into")
	if err != nil {
		return err
	}
	next := *l
	next.Disks = slices.Clone(l.Disks)
	var plugged []vmm.Disk
	type insert struct {
		i int
		d vmm.Disk
	}
	var inserts []insert
	for _, d := range disks {
		i := slices.IndexFunc(next.Disks, func(ld layoutDisk) bool {
			return ld.Removable && ld.Empty && ld.Serial == d.Serial && ld.ReadOnly == d.ReadOnly
		})
		if i < 0 {
			plugged = append(plugged, d)
			continue
		}
		inserts = append(inserts, insert{i, d})
		next.Disks[i].Empty, next.Disks[i].Medium = false, mediumNode(i)
	}
	if len(next.Disks)+len(plugged) > maxDisks {
		return fmt.Errorf("hot-plug into qemu %d: more than %d disks: %w", m.pid, maxDisks, errdefs.ErrInvalidArgument)
	}
	q, err := m.QMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	for _, in := range inserts {
		if err := insertDisk(ctx, q, in.i, in.d); err != nil {
			return fmt.Errorf("insert disk %s into qemu %d: %w", in.d.Serial, m.pid, err)
		}
	}
	m.mu.Lock()
	active := m.mediaActive
	m.mu.Unlock()
	if len(inserts) > 0 && !active {
		cycled, err := activateMedia(ctx, q)
		if err != nil {
			return fmt.Errorf("insert disks into qemu %d: %w", m.pid, err)
		}
		m.mu.Lock()
		m.mediaActive = cycled
		m.mu.Unlock()
	}
	for _, d := range plugged {
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
// next AttachDisks. A removable disk stays, emptied of its medium. The
// guest should have let the disks go first (a SCSI unplug is a surprise
// removal). On error the VM may hold some of the disks; callers discard
// it.
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
	for i := len(next.Disks) - 1; i >= len(l.Disks)-n; i-- {
		d := next.Disks[i]
		switch {
		case d.Removable && d.Empty:
		case d.Removable:
			if err := ejectDisk(ctx, q, i, d.Medium); err != nil {
				return fmt.Errorf("eject disk %s from qemu %d: %w", d.Serial, m.pid, err)
			}
			next.Disks[i].Empty, next.Disks[i].Medium = true, ""
		default:
			if err := detachDisk(ctx, q, i); err != nil {
				return fmt.Errorf("unplug disk %s from qemu %d: %w", d.Serial, m.pid, err)
			}
			next.Disks = next.Disks[:i]
		}
	}
	return m.setLayout(&next)
}

// mediumNode names the block node of a medium inserted into disk i; a
// node may not take the name of the device's backend, diskNode(i).
func mediumNode(i int) string { return fmt.Sprintf("medium%d", i) }

// insertDisk puts disk d into the VM's empty removable i-th disk: its fd
// set filled, a block node opened on it, and the node inserted into the
// device behind a tray QEMU opens and closes (which raises the unit
// attention the guest reads on its next open). The tray is opened by
// force should the guest hold it locked, which it does only while it has
// the device open, and an empty device cannot be opened.
func insertDisk(ctx context.Context, q *QMP, i int, d vmm.Disk) error {
	node := mediumNode(i)
	if err := addDiskNode(ctx, q, i, d, node); err != nil {
		return err
	}
	dev := diskDevice(i)
	return executeAll(ctx, q,
		qmpCommand{"blockdev-open-tray", map[string]any{"id": dev, "force": true}},
		qmpCommand{"blockdev-insert-medium", map[string]any{"id": dev, "node-name": node}},
		qmpCommand{"blockdev-close-tray", map[string]any{"id": dev}},
	)
}

// qmpCommand is a QMP command and its arguments.
type qmpCommand struct {
	name string
	args map[string]any
}

// executeAll runs commands in order until one fails.
func executeAll(ctx context.Context, q *QMP, commands ...qmpCommand) error {
	for _, c := range commands {
		if err := q.Execute(ctx, c.name, c.args, nil); err != nil {
			return err
		}
	}
	return nil
}

// activateMedia has a running VM stopped and continued, so that the
// media just inserted become active like the VM's other disks. A device
// created while QEMU waits for a migration (a restore's) starts with its
// backend's permissions held back until the migration's end activates
// its disk; an empty device has no disk then, so without this the
// medium keeps them held back for good, and the next snapshot fails to
// inactivate it ("bdrv_inactivate_all() failed"). cont activates every
// disk, and a backend once activated stays so for the media after. A
// paused VM is left paused (cycled is false): its own cont does the same.
func activateMedia(ctx context.Context, q *QMP) (cycled bool, err error) {
	var st struct {
		Running bool `json:"running"`
	}
	if err := q.Execute(ctx, "query-status", nil, &st); err != nil {
		return false, err
	}
	if !st.Running {
		return false, nil
	}
	if err := q.Execute(ctx, "stop", nil, nil); err != nil {
		return false, err
	}
	return true, q.Execute(ctx, "cont", nil, nil)
}

// ejectDisk undoes insertDisk(i), or takes out the medium a restored VM
// was started with (medium ""). The tray is opened by force: a guest
// that still holds the disk has it locked, and is told it is gone.
func ejectDisk(ctx context.Context, q *QMP, i int, medium string) error {
	dev := diskDevice(i)
	err := executeAll(ctx, q,
		qmpCommand{"blockdev-open-tray", map[string]any{"id": dev, "force": true}},
		qmpCommand{"blockdev-remove-medium", map[string]any{"id": dev}},
		qmpCommand{"blockdev-close-tray", map[string]any{"id": dev}},
	)
	if err != nil {
		return err
	}
	if medium != "" {
		if err := q.Execute(ctx, "blockdev-del", map[string]any{"node-name": medium}, nil); err != nil {
			return err
		}
	}
	return q.Execute(ctx, "remove-fd", map[string]any{"fdset-id": diskFdSet(i)}, nil)
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
	node := diskNode(i)
	if err := addDiskNode(ctx, q, i, d, node); err != nil {
		return err
	}
	// write-cache on is what -drive's default cache=writeback gives a
	// device started with the disk.
	return q.Execute(ctx, "device_add", map[string]any{
		"driver": "scsi-hd", "id": diskDevice(i), "drive": node, "serial": d.Serial,
		"bus": scsiBus, "channel": 0, "scsi-id": i, "lun": 0, "write-cache": "on",
	}, nil)
}

// addDiskNode fills the i-th disk's fd set with d's descriptors and opens
// a raw block node named node on it.
func addDiskNode(ctx context.Context, q *QMP, i int, d vmm.Disk, node string) error {
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
	return q.Execute(ctx, "blockdev-add", map[string]any{
		"driver": "raw", "node-name": node, "read-only": d.ReadOnly,
		"file": map[string]any{"driver": "file", "filename": fmt.Sprintf("/dev/fdset/%d", set), "locking": "off"},
	}, nil)
}
