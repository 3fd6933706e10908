package agent

import (
	"slices"
	"strings"

	"github.com/husk-vm/husk/shim/proto"
)

// appliedNetwork is what the guest's interfaces are once spec is applied:
// a copy without the DeviceMAC by which a setup found a device (it has
// the spec's MAC afterwards). Nil stays nil.
func appliedNetwork(spec *proto.NetworkSpec) *proto.NetworkSpec {
	if spec == nil {
		return nil
	}
	out := &proto.NetworkSpec{Interfaces: slices.Clone(spec.Interfaces)}
	for i := range out.Interfaces {
		out.Interfaces[i].DeviceMAC = ""
	}
	return out
}

// sameNetwork reports whether the applied specs a and b give the same
// interfaces, in the same order, the same names, MACs, addresses,
// gateway and MTU. An unknown (nil) network is never the same.
func sameNetwork(a, b *proto.NetworkSpec) bool {
	if a == nil || b == nil {
		return false
	}
	return slices.EqualFunc(a.Interfaces, b.Interfaces, func(x, y proto.InterfaceSpec) bool {
		return strings.EqualFold(x.MAC, y.MAC) && x.Name == y.Name && x.Address == y.Address &&
			x.Gateway == y.Gateway && x.MTU == y.MTU && x.DeviceMAC == y.DeviceMAC
	})
}
