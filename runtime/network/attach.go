package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/proto"
)

// tapPrefix begins every TAP husk makes: "hk", 12 hex digits of the
// container ID, and the interface's index (Linux allows 15 bytes).
const tapPrefix = "hk"

func tapName(containerID string, i int) string {
	return fmt.Sprintf("%s%s%x", tapPrefix, short(containerID), i)
}

// maxInterfaces keeps the TAP name's index one hex digit.
const maxInterfaces = 16

// Request is what Attach needs of a container.
type Request struct {
	ContainerID string
	// Name is the container's name without "/": a DNS name on
	// user-defined networks.
	Name       string
	Hostname   string
	Domainname string
	// Networks are the container's networks by name, as Configure
	// returned them.
	Networks     map[string]*network.EndpointSettings
	PortBindings network.PortMap
	PublishAll   bool
	Exposed      network.PortSet
	// DNS, DNSSearch and DNSOptions are --dns, --dns-search, --dns-option.
	DNS        []netip.Addr
	DNSSearch  []string
	DNSOptions []string
	// ExtraHosts are --add-host entries, "name:ip".
	ExtraHosts []string
}

// Attachment is what a booting container's VM and guest need.
type Attachment struct {
	// Nets go into vmm.Config.Nets.
	Nets []vmm.Net
	// Guest goes into proto.SetupSpec.Network; nil without a network.
	Guest *proto.NetworkSpec
	// Hosts and ResolvConf are the container's /etc/hosts and
	// /etc/resolv.conf.
	Hosts      string
	ResolvConf string
	// DNSServer is proto.SetupSpec.DNSServer: huskd's DNS server, on a
	// user-defined network's gateway, or "".
	DNSServer string
}

// sandboxRecord is one running container's connections, as persisted:
// the record is the allocation, so an address is taken exactly while its
// record exists.
type sandboxRecord struct {
	ContainerID string
	Name        string
	Hostname    string
	Endpoints   []endpointRecord
	Ports       []portRecord
	// What ConnectRunning and DisconnectRunning need to change a running
	// container's guest as Attach configured it: the hosts line's names,
	// the DNS server its resolv.conf names (none: the host's resolvers),
	// its --dns flags, and the index of the next interface (ethN), which
	// dockerd never reuses while the container runs.
	Domainname string     `json:",omitempty"`
	DNSServer  netip.Addr `json:",omitzero"`
	DNS        []string   `json:",omitempty"`
	DNSSearch  []string   `json:",omitempty"`
	DNSOptions []string   `json:",omitempty"`
	NextIface  int        `json:",omitempty"`
}

type endpointRecord struct {
	// Network is the network's name as the container names it.
	Network    string
	NetworkID  string
	EndpointID string
	Tap        string
	MAC        string
	Addr       netip.Addr
	Aliases    []string `json:",omitempty"`
	// DNSNames are the names the endpoint answers to on its network.
	DNSNames []string `json:",omitempty"`
	Gateway  bool     `json:",omitempty"` // carries the default route
	// Iface is the interface's name in the guest ("eth1").
	Iface string `json:",omitempty"`
}

// sandbox is a sandboxRecord and its live listeners.
type sandbox struct {
	rec     sandboxRecord
	proxies []proxy
}

func (sb *sandbox) closeProxies() {
	for _, p := range sb.proxies {
		_ = p.Close()
	}
	sb.proxies = nil
}

func (m *Manager) sandboxPath(id string) string { return filepath.Join(m.sandboxDir(), id+".json") }

func (m *Manager) loadSandboxes() error {
	entries, err := os.ReadDir(m.sandboxDir())
	if err != nil {
		return fmt.Errorf("list attached containers: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(m.sandboxDir(), e.Name())
		var rec sandboxRecord
		if err := readJSON(path, &rec); err != nil {
			m.log.Error("dropping unreadable container network record", "file", path, "err", err)
			_ = removeFile(path)
			continue
		}
		for _, ep := range rec.Endpoints {
			n, ok := m.nets[ep.NetworkID]
			if !ok || n.pool == nil {
				continue
			}
			if err := n.pool.claim(ep.Addr, rec.ContainerID); err != nil {
				m.log.Error("address of an attached container", "container", short(rec.ContainerID), "addr", ep.Addr, "err", err)
			}
		}
		m.sandboxes[rec.ContainerID] = &sandbox{rec: rec}
	}
	return nil
}

// Configure checks a container's network mode and endpoint settings at
// create and returns the networks it will join, keyed by name, as
// dockerd keeps them in the container's NetworkSettings.Networks.
func (m *Manager) Configure(mode string, endpoints map[string]*network.EndpointSettings) (map[string]*network.EndpointSettings, error) {
	switch {
	case mode == HostName:
		return nil, errdefs.ErrInvalidArgument.WithMessage("husk does not support --network host: every container is a VM with its own network stack")
	case strings.HasPrefix(mode, "container:"):
		return nil, errdefs.ErrInvalidArgument.WithMessage("husk does not support --network container:<name>: every container is a VM with its own network stack")
	case mode == "" || mode == "default":
		mode = BridgeName
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]*network.EndpointSettings{}
	var invalid EndpointErrors // reported together, as dockerd does
	add := func(ref string, cfg *network.EndpointSettings) error {
		n, err := m.lookupLocked(ref)
		if err != nil {
			return err
		}
		if n.rec.Name == HostName {
			return errdefs.ErrInvalidArgument.WithMessage("husk does not support --network host: every container is a VM with its own network stack")
		}
		ep := &network.EndpointSettings{}
		if cfg != nil {
			ep = cfg.Copy()
		}
		if err := checkEndpoint(n, ep); err != nil {
			invalid = append(invalid, &EndpointError{Network: n.rec.Name, Err: err})
		}
		ep.NetworkID = n.rec.ID
		out[n.rec.Name] = ep
		return nil
	}
	modeCfg := endpoints[mode]
	if err := add(mode, modeCfg); err != nil {
		return nil, err
	}
	for ref, cfg := range endpoints {
		if ref == mode {
			continue
		}
		if err := add(ref, cfg); err != nil {
			return nil, err
		}
	}
	if len(invalid) > 0 {
		return nil, invalid
	}
	if _, none := out[NoneName]; none && len(out) > 1 {
		return nil, errdefs.ErrInvalidArgument.WithMessage("container cannot be disconnected from network none and connected to other networks")
	}
	if len(out) > maxInterfaces {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("a container can join at most %d networks", maxInterfaces))
	}
	return out, nil
}

// EndpointError is a network's endpoint settings that dockerd refuses
// (validateEndpointSettings); Err is what `docker network connect`
// reports, Error what create does.
type EndpointError struct {
	Network string
	Err     error
}

func (e *EndpointError) Error() string {
	return fmt.Sprintf("invalid config for network %s: %v", e.Network, e.Err)
}

func (e *EndpointError) Unwrap() error { return e.Err }

// EndpointErrors are the networks whose endpoint settings a create
// refuses; the client's fault (a 400).
type EndpointErrors []*EndpointError

func (e EndpointErrors) Error() string {
	errs := make([]error, len(e))
	for i, err := range e {
		errs[i] = err
	}
	return joinErrors(errs)
}

// InvalidParameter marks the errors as the client's (errdefs).
func (EndpointErrors) InvalidParameter() {}

// checkEndpoint checks ep against n as dockerd's validateEndpointSettings
// does (moby v28), with all it finds in one error.
func checkEndpoint(n *netState, ep *network.EndpointSettings) error {
	var errs []error
	var ip netip.Addr
	if ep.IPAMConfig != nil {
		ip = ep.IPAMConfig.IPv4Address
	}
	if n.rec.predefined() {
		if ip.IsValid() {
			errs = append(errs, errors.New("user specified IP address is supported on user defined networks only"))
		}
		if len(ep.Aliases) > 0 {
			errs = append(errs, errors.New("network-scoped alias is supported only for containers in user defined networks"))
		}
	}
	if ip.IsValid() && (!ip.Is4() || ip.IsUnspecified()) {
		errs = append(errs, fmt.Errorf("invalid IPv4 address: %s", ip))
	}
	// dockerd's default bridge has a configured subnet (its bridge's), so
	// only the null driver's network and subnets husk chose have none.
	switch {
	case !ip.IsValid() || n.rec.Name == BridgeName:
	case n.pool == nil || n.rec.AutoSubnet:
		errs = append(errs, errors.New("user specified IP address is supported only when connecting to networks with user configured subnets"))
	case !n.rec.Subnet.Contains(ip):
		errs = append(errs, fmt.Errorf("no configured subnet or ip-range contain the IP address %s", ip))
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New("invalid endpoint settings:\n" + joinErrors(errs))
}

// joinErrors words errs as moby's multierror.Join: one as it is, more as
// a list.
func joinErrors(errs []error) string {
	if len(errs) == 1 {
		return strings.TrimSpace(errs[0].Error())
	}
	lines := make([]string, len(errs))
	for i, err := range errs {
		lines[i] = strings.ReplaceAll(err.Error(), "\n", "\n\t")
	}
	return "* " + strings.Join(lines, "\n* ")
}

// Attach connects a starting container: addresses, TAPs on the networks'
// bridges, published ports, DNS names. On error nothing is left.
func (m *Manager) Attach(ctx context.Context, req Request) (_ *Attachment, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.sandboxes[req.ContainerID]; ok {
		// A stale attachment (a crash between start and record): drop it.
		m.releaseLocked(old)
	}
	names := make([]string, 0, len(req.Networks))
	for name := range req.Networks {
		names = append(names, name)
	}
	sort.Strings(names)
	sb := &sandbox{rec: sandboxRecord{ContainerID: req.ContainerID, Name: req.Name, Hostname: req.Hostname,
		Domainname: req.Domainname, DNSSearch: req.DNSSearch, DNSOptions: req.DNSOptions}}
	for _, a := range req.DNS {
		sb.rec.DNS = append(sb.rec.DNS, a.String())
	}
	defer func() {
		if err != nil {
			m.releaseLocked(sb)
		}
	}()
	var bridgeOnly = true
	for _, name := range names {
		cfg := req.Networks[name]
		n, ok := m.nets[cfg.NetworkID]
		if !ok {
			if n, err = m.lookupLocked(name); err != nil {
				return nil, err
			}
		}
		if n.pool == nil {
			continue // none
		}
		if n.rec.Name != BridgeName {
			bridgeOnly = false
		}
		var addr netip.Addr
		if cfg.IPAMConfig != nil && cfg.IPAMConfig.IPv4Address.IsValid() {
			addr = cfg.IPAMConfig.IPv4Address
			if err := n.pool.claim(addr, req.ContainerID); err != nil {
				return nil, err
			}
		} else if addr, err = n.pool.allocate(req.ContainerID); err != nil {
			return nil, err
		}
		epID, err := newID()
		if err != nil {
			n.pool.release(addr, req.ContainerID)
			return nil, err
		}
		mac := macFor(addr).String()
		if len(cfg.MacAddress) > 0 {
			mac = cfg.MacAddress.String()
		}
		ep := endpointRecord{
			Network: n.rec.Name, NetworkID: n.rec.ID, EndpointID: epID,
			Tap: tapName(req.ContainerID, len(sb.rec.Endpoints)), MAC: mac, Addr: addr,
			Aliases: slices.Clone(cfg.Aliases), Iface: fmt.Sprintf("eth%d", len(sb.rec.Endpoints)),
		}
		if n.rec.Name != BridgeName {
			ep.DNSNames = dnsNames(req.Name, cfg.Aliases, req.ContainerID, req.Hostname)
		}
		sb.rec.Endpoints = append(sb.rec.Endpoints, ep)
	}
	// The default route goes through the first network, in name order,
	// that is not internal (dockerd picks by GwPriority, then by name).
	for i := range sb.rec.Endpoints {
		if !m.nets[sb.rec.Endpoints[i].NetworkID].rec.Internal {
			sb.rec.Endpoints[i].Gateway = true
			break
		}
	}
	if err := m.openPortsLocked(sb, req); err != nil {
		return nil, err
	}
	sb.rec.NextIface = len(sb.rec.Endpoints)
	if !bridgeOnly {
		sb.rec.DNSServer = firstDNSServer(m.nets, sb.rec.Endpoints)
	}
	// Persist before creating TAPs: a crash from here on leaves a record
	// that the next Start releases, never an address or TAP nobody owns.
	if err := writeJSON(m.sandboxPath(req.ContainerID), sb.rec); err != nil {
		return nil, err
	}
	m.sandboxes[req.ContainerID] = sb
	att := &Attachment{Guest: &proto.NetworkSpec{}}
	var own netip.Addr
	var dnsServer netip.Addr
	for _, ep := range sb.rec.Endpoints {
		n := m.nets[ep.NetworkID]
		if err := m.links.addTap(ep.Tap, n.rec.Bridge); err != nil {
			return nil, err
		}
		att.Nets = append(att.Nets, vmm.Net{Tap: ep.Tap, MAC: ep.MAC})
		ifc := proto.InterfaceSpec{
			MAC: ep.MAC, Name: ep.Iface,
			Address: netip.PrefixFrom(ep.Addr, n.rec.Subnet.Bits()).String(), MTU: n.mtu(),
		}
		if ep.Gateway {
			ifc.Gateway = n.rec.Gateway.String()
		}
		att.Guest.Interfaces = append(att.Guest.Interfaces, ifc)
		if !own.IsValid() {
			own = ep.Addr
		}
		if !dnsServer.IsValid() && n.rec.Name != BridgeName {
			dnsServer = n.rec.Gateway
		}
	}
	if len(sb.rec.Endpoints) == 0 {
		att.Guest = nil
	}
	m.dns.add(req.ContainerID, sb.rec.Endpoints)
	m.dns.setUpstreams(req.ContainerID, sb.rec.DNS)
	att.Hosts = hostsFile(req.Hostname, req.Domainname, own, req.ExtraHosts, m.opts.BridgeIP.Addr())
	hostResolv, _ := os.ReadFile(m.opts.ResolvConf)
	var dns []string
	for _, a := range req.DNS {
		dns = append(dns, a.String())
	}
	switch {
	case len(sb.rec.Endpoints) == 0:
		// --network none: dockerd still writes the host's resolver file.
		att.ResolvConf = bridgeResolvConf(string(hostResolv), dns, req.DNSSearch, req.DNSOptions)
	case bridgeOnly || !dnsServer.IsValid():
		att.ResolvConf = bridgeResolvConf(string(hostResolv), dns, req.DNSSearch, req.DNSOptions)
	default:
		att.ResolvConf = embeddedResolvConf(string(hostResolv), req.DNSSearch, req.DNSOptions)
		att.DNSServer = m.dns.address(dnsServer)
	}
	m.log.Info("container attached", "container", short(req.ContainerID), "endpoints", len(sb.rec.Endpoints), "ports", len(sb.rec.Ports))
	return att, nil
}

// dnsNames are the names a container answers to on a user-defined
// network: its name, its aliases, its short ID and its hostname.
func dnsNames(name string, aliases []string, id, hostname string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range append(append([]string{name}, aliases...), short(id), hostname) {
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		out = append(out, n)
	}
	return out
}

// Detach disconnects a container that stopped: its ports close, its TAPs
// go and its addresses are free again. Detaching a container that is not
// attached does nothing.
func (m *Manager) Detach(ctx context.Context, containerID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, ok := m.sandboxes[containerID]
	if !ok {
		return nil
	}
	return m.releaseLocked(sb)
}

// releaseLocked undoes an attachment, whatever part of it was made.
func (m *Manager) releaseLocked(sb *sandbox) error {
	sb.closeProxies()
	m.dns.remove(sb.rec.ContainerID)
	var errs []error
	for _, ep := range sb.rec.Endpoints {
		if err := m.links.deleteLink(ep.Tap); err != nil {
			errs = append(errs, err)
		}
		if n, ok := m.nets[ep.NetworkID]; ok && n.pool != nil {
			n.pool.release(ep.Addr, sb.rec.ContainerID)
		}
	}
	if m.sandboxes[sb.rec.ContainerID] == sb {
		delete(m.sandboxes, sb.rec.ContainerID)
		if err := removeFile(m.sandboxPath(sb.rec.ContainerID)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		m.log.Warn("releasing a container's network", "container", short(sb.rec.ContainerID), "err", err)
		return err
	}
	return nil
}

// restoreSandboxLocked reopens the published ports of a container that
// kept running while the daemon was away; its TAPs are held by its VM.
func (m *Manager) restoreSandboxLocked(ctx context.Context, sb *sandbox) error {
	m.dns.add(sb.rec.ContainerID, sb.rec.Endpoints)
	m.dns.setUpstreams(sb.rec.ContainerID, sb.rec.DNS)
	target, ok := sb.gatewayAddr()
	if !ok {
		return nil
	}
	var errs []error
	for _, p := range sb.rec.Ports {
		px, err := listenProxy(p, target, m.log)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sb.proxies = append(sb.proxies, px)
	}
	return errors.Join(errs...)
}

// gatewayAddr is the address published ports forward to: the one on the
// network that carries the default route, as docker-proxy's target.
func (sb *sandbox) gatewayAddr() (netip.Addr, bool) {
	for _, ep := range sb.rec.Endpoints {
		if ep.Gateway {
			return ep.Addr, true
		}
	}
	if len(sb.rec.Endpoints) > 0 {
		return sb.rec.Endpoints[0].Addr, true
	}
	return netip.Addr{}, false
}

// Settings are a container's NetworkSettings.Ports and .Networks as
// inspect shows them: configured networks with the live endpoint data of
// a running container, and its published ports.
func (m *Manager) Settings(containerID string, configured map[string]*network.EndpointSettings, exposed network.PortSet) (network.PortMap, map[string]*network.EndpointSettings) {
	m.mu.Lock()
	defer m.mu.Unlock()
	nets := map[string]*network.EndpointSettings{}
	for name, cfg := range configured {
		ep := &network.EndpointSettings{}
		if cfg != nil {
			ep = cfg.Copy()
		}
		if n, err := m.lookupLocked(name); err == nil {
			ep.NetworkID = n.rec.ID
		}
		ep.MacAddress = nil
		nets[name] = ep
	}
	ports := network.PortMap{}
	sb, ok := m.sandboxes[containerID]
	if !ok {
		return ports, nets
	}
	for _, e := range sb.rec.Endpoints {
		n, ok := m.nets[e.NetworkID]
		if !ok {
			continue
		}
		ep := nets[e.Network]
		if ep == nil {
			ep = &network.EndpointSettings{}
			nets[e.Network] = ep
		}
		ep.NetworkID = e.NetworkID
		ep.EndpointID = e.EndpointID
		ep.Gateway = n.rec.Gateway
		ep.IPAddress = e.Addr
		ep.IPPrefixLen = n.rec.Subnet.Bits()
		if mac, err := parseMAC(e.MAC); err == nil {
			ep.MacAddress = mac
		}
		ep.DNSNames = slices.Clone(e.DNSNames)
	}
	// Exposed ports that are not published show with no binding.
	for p := range exposed {
		ports[p] = nil
	}
	for _, p := range sb.rec.Ports {
		port, err := network.ParsePort(p.Port)
		if err != nil {
			continue
		}
		ports[port] = append(ports[port], network.PortBinding{HostIP: p.HostIP, HostPort: fmt.Sprint(p.HostPort)})
	}
	return ports, nets
}
