package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
)

// NIC hot-plug. A NIC sits in one of the maxNets slots behind the NIC
// bridge (nicSlotOpt); its netdev and device are named after the slot
// (netdevID, nicID), at boot as when hot-plugged, so RemoveNIC finds
// either kind.
//
// QEMU runs as "nobody" by the time a NIC is hot-plugged and could not
// attach to a root-owned persistent TAP by name, so the daemon opens the
// TAP and hands QEMU the descriptor (getfd, then netdev_add fd=NAME), as
// snapshots hand it their file.

var _ vmm.NICHotplugger = (*Machine)(nil)

func netdevID(slot int) string { return fmt.Sprintf("net%d", slot) }
func nicID(slot int) string    { return fmt.Sprintf("vnet%d", slot) }
func nicFD(slot int) string    { return fmt.Sprintf("husk-nic%d", slot) }

// AddNIC implements vmm.NICHotplugger: n goes into the lowest free NIC
// slot, and the VM's layout records it, so a snapshot taken later
// restores into a VM started with its NICs in those slots.
func (m *Machine) AddNIC(ctx context.Context, n vmm.Net) (err error) {
	mac, err := net.ParseMAC(n.MAC)
	if err != nil || n.Tap == "" {
		return fmt.Errorf("hot-plug NIC %+v into qemu %d: %w", n, m.pid, errdefs.ErrInvalidArgument)
	}
	m.hotplug.Lock()
	defer m.hotplug.Unlock()
	l, err := m.pciLayout("hot-plug a NIC into")
	if err != nil {
		return err
	}
	used := l.netSlots()
	slot := -1
	for s := range maxNets {
		if !slices.Contains(used, s) {
			slot = s
			break
		}
	}
	if slot < 0 {
		return fmt.Errorf("hot-plug NIC into qemu %d: all %d NIC slots are taken: %w", m.pid, maxNets, errdefs.ErrUnavailable)
	}
	for _, nic := range l.NICs {
		if strings.EqualFold(nic.MAC, mac.String()) {
			return fmt.Errorf("hot-plug NIC into qemu %d: it already has a NIC with MAC %s: %w", m.pid, mac, errdefs.ErrAlreadyExists)
		}
	}
	open := m.openTap
	if open == nil {
		open = openTap
	}
	tap, err := open(n.Tap)
	if err != nil {
		return fmt.Errorf("hot-plug NIC into qemu %d: %w", m.pid, err)
	}
	defer tap.Close() // QEMU holds its own duplicate
	q, err := m.QMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	// Undo on the way out must not be cut short by the caller's context.
	undo := context.WithoutCancel(ctx)
	if err := q.ExecuteWithFile(ctx, "getfd", map[string]string{"fdname": nicFD(slot)}, nil, tap); err != nil {
		return fmt.Errorf("hot-plug NIC into qemu %d: pass tap %s: %w", m.pid, n.Tap, err)
	}
	// netdev_add takes the named descriptor out of the monitor's hands;
	// until it has, the monitor holds it.
	err = q.Execute(ctx, "netdev_add", map[string]any{"type": "tap", "id": netdevID(slot), "fd": nicFD(slot)}, nil)
	if err != nil {
		_ = q.Execute(undo, "closefd", map[string]string{"fdname": nicFD(slot)}, nil)
		return fmt.Errorf("hot-plug NIC into qemu %d: %w", m.pid, err)
	}
	err = q.Execute(ctx, "device_add", map[string]any{
		"driver": "virtio-net-pci", "id": nicID(slot), "netdev": netdevID(slot),
		"mac": mac.String(), "bus": nicBridge, "addr": nicAddr(slot), "romfile": "",
	}, nil)
	if err != nil {
		_ = q.Execute(undo, "netdev_del", map[string]string{"id": netdevID(slot)}, nil)
		return fmt.Errorf("hot-plug NIC into qemu %d: %w", m.pid, err)
	}
	next := *l
	next.NICs = append(slices.Clone(nicsOf(l)), layoutNIC{Slot: slot, MAC: mac.String()})
	slices.SortFunc(next.NICs, func(a, b layoutNIC) int { return a.Slot - b.Slot })
	next.Nets = len(next.NICs)
	if err := m.setLayout(&next); err != nil {
		// The VM must not hold a NIC its layout does not record: a
		// snapshot would then not restore.
		if derr := unplugNIC(undo, q, slot); derr != nil {
			m.log.Error("unplug a NIC whose record failed", "slot", slot, "err", derr)
		}
		return err
	}
	m.log.Debug("NIC hot-plugged", "tap", n.Tap, "mac", mac, "slot", slot)
	return nil
}

// RemoveNIC implements vmm.NICHotplugger. The guest must release the
// device (ACPI eject) before QEMU deletes it; until the DEVICE_DELETED
// event, the TAP is still in use.
func (m *Machine) RemoveNIC(ctx context.Context, mac string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("unplug NIC %q from qemu %d: %w", mac, m.pid, errdefs.ErrInvalidArgument)
	}
	m.hotplug.Lock()
	defer m.hotplug.Unlock()
	l, err := m.pciLayout("unplug a NIC from")
	if err != nil {
		return err
	}
	nics := nicsOf(l)
	i := slices.IndexFunc(nics, func(n layoutNIC) bool { return strings.EqualFold(n.MAC, hw.String()) })
	if i < 0 {
		return fmt.Errorf("unplug NIC from qemu %d: no NIC with MAC %s: %w", m.pid, hw, errdefs.ErrNotFound)
	}
	slot := nics[i].Slot
	q, err := m.QMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	if err := unplugNIC(ctx, q, slot); err != nil {
		return fmt.Errorf("unplug NIC %s from qemu %d: %w", hw, m.pid, err)
	}
	next := *l
	next.NICs = slices.Delete(slices.Clone(nics), i, i+1)
	next.Nets = len(next.NICs)
	if err := m.setLayout(&next); err != nil {
		return err
	}
	m.log.Debug("NIC unplugged", "mac", hw, "slot", slot)
	return nil
}

// unplugNIC deletes the NIC in slot and its netdev, waiting for the guest
// to let the device go.
func unplugNIC(ctx context.Context, q *QMP, slot int) error {
	if err := deleteDevice(ctx, q, nicID(slot)); err != nil {
		return err
	}
	return q.Execute(ctx, "netdev_del", map[string]string{"id": netdevID(slot)}, nil)
}

// deleteDevice unplugs device id and waits for QEMU to report it deleted
// (for a PCI device, once the guest has let it go). Events queued on q by
// earlier commands are read too, so a DEVICE_DELETED that came early is
// not missed.
func deleteDevice(ctx context.Context, q *QMP, id string) error {
	if err := q.Execute(ctx, "device_del", map[string]string{"id": id}, nil); err != nil {
		return err
	}
	for {
		ev, err := q.NextEvent(ctx)
		if err != nil {
			return fmt.Errorf("wait for the guest to release %s: %w", id, err)
		}
		if ev.Event != "DEVICE_DELETED" {
			continue
		}
		var data struct {
			Device string `json:"device"`
		}
		if json.Unmarshal(ev.Data, &data) == nil && data.Device == id {
			return nil
		}
	}
}

// pciLayout is the VM's layout when it can hot-plug: a Q35 machine whose
// layout is known.
func (m *Machine) pciLayout(what string) (*layout, error) {
	m.mu.Lock()
	l := m.layout
	m.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("%s qemu %d: its layout is unknown: %w", what, m.pid, errdefs.ErrNotImplemented)
	}
	if l.Machine != MachineQ35 {
		return nil, fmt.Errorf("%s qemu %d: machine %s has no PCI hot-plug: %w", what, m.pid, l.Machine, errdefs.ErrNotImplemented)
	}
	return l, nil
}

// nicsOf are a layout's NICs; a layout from before NICs were recorded
// has them in the first slots with MACs nobody knows.
func nicsOf(l *layout) []layoutNIC {
	if l.NICs != nil || l.Nets == 0 {
		return l.NICs
	}
	out := make([]layoutNIC, l.Nets)
	for i := range out {
		out[i].Slot = i
	}
	return out
}

// setLayout records l in the VM directory, then in memory.
func (m *Machine) setLayout(l *layout) error {
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("encode vm layout: %w", err)
	}
	if err := vmmproc.WriteFileAtomic(filepath.Join(m.dir, layoutFile), b); err != nil {
		return err
	}
	m.mu.Lock()
	m.layout = l
	m.mu.Unlock()
	return nil
}

// openTap attaches to the persistent TAP name, with the flags it was made
// with (network.vmTap; QEMU -netdev tap,ifname= opens it so): no packet
// information, virtio-net headers.
func openTap(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach to tap %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}
