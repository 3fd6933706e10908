package agent

import (
	"slices"
	"strings"

	"github.com/husk-vm/husk/shim/proto"
)

// appliedNetwork is what the guest's interfaces are once spec is applied:
// a copy without the DeviceMAC by which a setup found a device (it has
// the spec's MAC afterwards), its MACs in lower case as the kernel shows
// them. Nil stays nil.
func appliedNetwork(spec *proto.NetworkSpec) *proto.NetworkSpec {
	if spec == nil {
		return nil
	}
	out := &proto.NetworkSpec{Interfaces: slices.Clone(spec.Interfaces)}
	for i := range out.Interfaces {
		out.Interfaces[i].DeviceMAC = ""
		out.Interfaces[i].MAC = strings.ToLower(out.Interfaces[i].MAC)
	}
	return out
}

// sameNetwork reports whether the applied specs a and b give the same
// interfaces, in the same order. An unknown (nil) network is never the
// same.
func sameNetwork(a, b *proto.NetworkSpec) bool {
	return a != nil && b != nil && slices.Equal(a.Interfaces, b.Interfaces)
}
