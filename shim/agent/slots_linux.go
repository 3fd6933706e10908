//go:build linux

package agent

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/vishvananda/netlink"

	"github.com/husk-vm/husk/shim/proto"
)

// nameBySlot renames the guest's NICs to the spec's names, matched in
// PCI slot order, before a restored guest is re-addressed by name. The
// host restores a VM with its NICs in the snapshotted VM's slots, in the
// order of the spec; but a VM that had NICs hot-plugged and unplugged
// may name them eth0 and eth2 where the spec, made afresh, says eth0 and
// eth1, and a name lookup would then address the wrong device. When the
// guest does not have exactly one NIC per interface of the spec (or no
// PCI), names are left alone and ReaddressNetwork matches by name and
// MAC as before.
//
// Linux renames only links that are down; the ones renamed come back up
// in ReaddressNetwork, which also puts the default route back.
func nameBySlot(spec *proto.NetworkSpec) error {
	if spec == nil {
		return nil
	}
	nics, err := nicsBySlot()
	if err != nil || len(nics) != len(spec.Interfaces) {
		return nil
	}
	var renamed []int
	for i, l := range nics {
		if l.Attrs().Name == spec.Interfaces[i].Name {
			continue
		}
		if err := netlink.LinkSetDown(l); err != nil {
			return fmt.Errorf("bring down %s to rename it: %w", l.Attrs().Name, err)
		}
		// Through temporary names: two interfaces cannot swap names
		// directly.
		if err := netlink.LinkSetName(l, fmt.Sprintf("husktmp%d", i)); err != nil {
			return fmt.Errorf("rename %s: %w", l.Attrs().Name, err)
		}
		renamed = append(renamed, i)
	}
	for _, i := range renamed {
		if err := netlink.LinkSetName(nics[i], spec.Interfaces[i].Name); err != nil {
			return fmt.Errorf("rename interface in slot %d to %s: %w", i, spec.Interfaces[i].Name, err)
		}
	}
	return nil
}

// nicsBySlot lists the links that sit on a PCI device, in the order of
// their devices' PCI addresses.
func nicsBySlot() ([]netlink.Link, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	type nic struct {
		link netlink.Link
		pci  string
	}
	var nics []nic
	for _, l := range links {
		// .../0000:00:05.0/virtio2: the parent is the PCI function.
		dev, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", l.Attrs().Name, "device"))
		if err != nil {
			continue // lo, or a link on no device
		}
		pci := filepath.Base(filepath.Dir(dev))
		if _, _, _, _, ok := parsePCIAddress(pci); !ok {
			return nil, fmt.Errorf("interface %s is not on PCI (%s)", l.Attrs().Name, dev)
		}
		nics = append(nics, nic{l, pci})
	}
	// The domain:bus:slot.function form sorts as text: fixed-width hex.
	sort.Slice(nics, func(i, j int) bool { return nics[i].pci < nics[j].pci })
	out := make([]netlink.Link, len(nics))
	for i, n := range nics {
		out[i] = n.link
	}
	return out, nil
}

// parsePCIAddress splits "0000:00:05.0".
func parsePCIAddress(s string) (domain, bus, slot, fn int, ok bool) {
	n, err := fmt.Sscanf(s, "%04x:%02x:%02x.%1x", &domain, &bus, &slot, &fn)
	return domain, bus, slot, fn, err == nil && n == 4 && len(s) == 12
}
