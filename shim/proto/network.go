package proto

// NetworkSpec configures the guest's network interfaces at OpSetup. The
// loopback interface is always up; a nil or empty spec leaves the guest
// with nothing else (docker run --network none).
type NetworkSpec struct {
	Interfaces []InterfaceSpec `json:"interfaces,omitempty"`
}

// InterfaceSpec is one virtio-net interface, found by its MAC address.
type InterfaceSpec struct {
	// MAC is the address the host gave the device ("02:42:0a:7b:00:02").
	MAC string `json:"mac"`
	// Name is what the agent renames the interface to ("eth0").
	Name string `json:"name"`
	// Address is the interface's IPv4 address with its prefix length
	// ("10.123.0.2/16").
	Address string `json:"address"`
	// Gateway, when set, becomes the guest's default route through this
	// interface. At most one interface has one.
	Gateway string `json:"gateway,omitempty"`
	// MTU is left at the device's default when zero.
	MTU int `json:"mtu,omitempty"`
	// DeviceMAC, when set, is the address the device has now, which the
	// host could not choose (a VM restored from a template keeps the
	// template's NICs): the agent finds the device by it and gives it MAC
	// before bringing it up.
	DeviceMAC string `json:"deviceMac,omitempty"`
}
