package vmm

import "context"

// NICHotplugger is a Machine that can gain and lose network interfaces
// while it runs (docker network connect/disconnect of a running
// container). It is optional: callers check for it with a type
// assertion, and a driver or machine type without PCI hot-plug does not
// implement it or fails with errdefs.ErrNotImplemented.
//
// Hot-plugged NICs are part of the VM from then on: a snapshot taken
// later records them, and restores it into a VM whose Config.Nets lists
// the NICs the snapshotted VM had, in the order of their PCI slots
// (the order Config.Nets placed them at boot, with a hot-plugged NIC in
// the lowest slot that was free).
type NICHotplugger interface {
	// AddNIC plugs a virtio-net device backed by the existing TAP n.Tap
	// with address n.MAC, and returns once the VMM has it; the guest
	// sees it when its hot-plug handler has probed the device. On error
	// the VM has no new device.
	AddNIC(ctx context.Context, n Net) error
	// RemoveNIC unplugs the device with address mac and returns once the
	// guest has released it and the VMM has let go of its TAP. The error
	// wraps errdefs.ErrNotFound when the VM has no such device.
	RemoveNIC(ctx context.Context, mac string) error
}
