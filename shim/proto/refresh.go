package proto

// OpRefresh freshens a guest that has just been restored from a snapshot,
// whose clock stopped when the snapshot was taken and whose RNG state is
// shared with every other restore of that snapshot. The agent sets the
// clock, mixes the host's entropy into the RNG and reseeds it, then
// answers; nothing follows on the stream.
const OpRefresh Op = "refresh"

// RefreshSpec is OpRefresh's argument (Request.Refresh).
type RefreshSpec struct {
	// TimeUnixNano is the host's wall clock when the request was sent;
	// 0 leaves the guest clock alone.
	TimeUnixNano int64 `json:"timeUnixNano,omitempty"`
	// Entropy is fresh randomness from the host (at least 32 bytes to
	// count), credited to the guest's pool before the RNG is reseeded, so
	// that two restores of one snapshot do not draw the same numbers.
	Entropy []byte `json:"entropy,omitempty"`
	// Identity, when set, gives the restored guest the identity of the
	// container it now is: a copy of a snapshot must not answer with the
	// name, addresses or MACs of the container it was taken from.
	Identity *IdentitySpec `json:"identity,omitempty"`
}

// IdentitySpec is what differs between restored copies of one snapshot.
type IdentitySpec struct {
	// Hostname is set in the UTS namespace of every process that has its
	// own (the main processes; execs share theirs), unless it is the one
	// the agent last gave them.
	Hostname string `json:"hostname,omitempty"`
	// Hosts and ResolvConf replace the contents of the container's
	// /etc/hosts and /etc/resolv.conf in place (they are bind mounts).
	Hosts      string `json:"hosts,omitempty"`
	ResolvConf string `json:"resolvConf,omitempty"`
	// DNSServer comes with ResolvConf and replaces SetupSpec.DNSServer
	// when it is set.
	DNSServer string `json:"dnsServer,omitempty"`
	// Network re-addresses the interfaces, found by their names (when
	// the guest has one NIC per interface, it first renames them to
	// these names in PCI slot order, which is the order of the restored
	// VM's vmm.Config.Nets): each gets the new MAC and address, its old
	// IPv4 addresses go,
	// the default route is replaced, and the guest announces the new
	// address with a gratuitous ARP. Nil leaves the interfaces alone, and
	// so does an agent whose last setup or refresh applied this very
	// network (the same interfaces in order, names, MACs, addresses,
	// gateway and MTU) with no interface added or removed since: a
	// checkpoint restored into its own container.
	Network *NetworkSpec `json:"network,omitempty"`
}

// OpClock shifts the guest's wall clock by Request.Clock.Shift, if it is
// set, and answers with the clock as the agent answers
// (Response.TimeUnixNano). OpRefresh sets the clock to the host's time
// when it sent the request, so the guest lags by how long the request
// took to reach it: 100-170 ms for the first request into a guest just
// restored or booted under TCG. A shift is relative, so the time it takes
// to arrive does not matter, and the host works it out from OpClock's
// answers alone (shim/host SyncClock).
const OpClock Op = "clock"

// ClockSpec is OpClock's argument; nil or a zero Shift only reads the
// clock.
type ClockSpec struct {
	ShiftNano int64 `json:"shiftNano,omitempty"`
}
