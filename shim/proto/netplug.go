package proto

// OpAddInterface configures an interface the host has just hot-plugged
// into the VM (docker network connect of a running container);
// OpRemoveInterface deconfigures one the host is about to unplug (docker
// network disconnect). Both take Request.Interface; nothing follows the
// Response.
const (
	OpAddInterface    Op = "add-interface"
	OpRemoveInterface Op = "remove-interface"
)

// InterfaceChangeSpec is the argument of OpAddInterface and
// OpRemoveInterface.
type InterfaceChangeSpec struct {
	// Interface is the interface, found by MAC. OpAddInterface waits for
	// the guest to probe the new device, renames it to Name, addresses
	// it, brings it up, and routes by default through it when Gateway is
	// set. OpRemoveInterface takes its addresses away and brings it down.
	Interface InterfaceSpec `json:"interface"`
	// HostsEntry is the /etc/hosts line of the container's own address on
	// the network ("10.124.1.3\tabc123def456"). OpAddInterface appends
	// it; OpRemoveInterface removes every line that names the same hosts,
	// as dockerd 20.10 does.
	HostsEntry string `json:"hostsEntry,omitempty"`
	// ResolvConf, when set, replaces the contents of /etc/resolv.conf:
	// the container's DNS server changed with its networks.
	ResolvConf string `json:"resolvConf,omitempty"`
	// DNSServer comes with ResolvConf and replaces SetupSpec.DNSServer
	// when it is set.
	DNSServer string `json:"dnsServer,omitempty"`
	// DefaultRoute, for OpRemoveInterface of the interface that carried
	// the default route, moves it to another interface.
	DefaultRoute *DefaultRoute `json:"defaultRoute,omitempty"`
}

// DefaultRoute is a default route through the interface named Interface.
type DefaultRoute struct {
	Interface string `json:"interface"`
	Gateway   string `json:"gateway"`
}
