package cloudhypervisor

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
)

// NIC hot-plug through vm.add-net and vm.remove-device. cloud-hypervisor
// opens the TAP by name itself and keeps the VM's device list in its
// config (vm.info), so the driver records nothing of its own: a NIC is
// found by its MAC there, and a snapshot's config.json lists the NICs
// the VM has, hot-plugged ones included, in the order a restore expects
// them (see RewriteConfig).

var _ vmm.NICHotplugger = (*Machine)(nil)

// VmRemoveDevice is the body of vm.remove-device.
type VmRemoveDevice struct {
	ID string `json:"id"`
}

// AddNIC implements vmm.NICHotplugger. The device's id is the lowest
// "net<N>" the VM does not use, after the boot NICs' net0, net1...
func (m *Machine) AddNIC(ctx context.Context, n vmm.Net) error {
	mac, err := net.ParseMAC(n.MAC)
	if err != nil || n.Tap == "" {
		return fmt.Errorf("hot-plug NIC %+v: %w", n, errdefs.ErrInvalidArgument)
	}
	if err := m.running("hot-plug NIC"); err != nil {
		return err
	}
	info, err := m.Info(ctx)
	if err != nil {
		return fmt.Errorf("hot-plug NIC: %w", err)
	}
	for _, nc := range info.Config.Net {
		if strings.EqualFold(nc.MAC, mac.String()) {
			return fmt.Errorf("hot-plug NIC: the VM already has a NIC with MAC %s: %w", mac, errdefs.ErrAlreadyExists)
		}
	}
	id := freeID(deviceIDs(&info.Config), "net")
	if err := m.api.put(ctx, "vm.add-net", &NetConfig{Tap: n.Tap, MAC: mac.String(), ID: id}); err != nil {
		return fmt.Errorf("hot-plug NIC on tap %s: %w", n.Tap, err)
	}
	m.log.Debug("NIC hot-plugged", "tap", n.Tap, "mac", mac, "id", id)
	return nil
}

// RemoveNIC implements vmm.NICHotplugger. cloud-hypervisor drops the
// device from the VM's config at once and asks the guest to eject it.
func (m *Machine) RemoveNIC(ctx context.Context, mac string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("unplug NIC %q: %w", mac, errdefs.ErrInvalidArgument)
	}
	if err := m.running("unplug NIC"); err != nil {
		return err
	}
	info, err := m.Info(ctx)
	if err != nil {
		return fmt.Errorf("unplug NIC: %w", err)
	}
	i := slices.IndexFunc(info.Config.Net, func(nc NetConfig) bool { return strings.EqualFold(nc.MAC, hw.String()) })
	if i < 0 {
		return fmt.Errorf("unplug NIC: the VM has no NIC with MAC %s: %w", hw, errdefs.ErrNotFound)
	}
	id := info.Config.Net[i].ID
	if id == "" {
		// cloud-hypervisor names every device; a config without the
		// name is not one it gave.
		return fmt.Errorf("unplug NIC %s: cloud-hypervisor reports no device id for it: %w", hw, errdefs.ErrInternal)
	}
	if err := m.api.put(ctx, "vm.remove-device", &VmRemoveDevice{ID: id}); err != nil {
		return fmt.Errorf("unplug NIC %s: %w", hw, err)
	}
	m.log.Debug("NIC unplugged", "mac", hw, "id", id)
	return nil
}
