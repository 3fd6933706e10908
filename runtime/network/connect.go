package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/proto"
)

// Connecting and disconnecting a running container (docker network
// connect/disconnect): the container's VM gains or loses one NIC by
// hot-plug, which the caller does between these calls. The order is
//
//	connect:    ConnectRunning (address, TAP, DNS names, record)
//	            → hot-plug Plug.Net → guest applies Plug.Change;
//	            on failure DisconnectRunning undoes the first step
//	disconnect: Unplugging → guest applies Unplug.Change
//	            → unplug Unplug.MAC → DisconnectRunning
//
// so that a TAP exists for as long as a NIC may use it.

// Plug is what joining one more network takes of a running container's
// VM (Net, to hot-plug) and guest (Change, for the agent).
type Plug struct {
	Net    vmm.Net
	Change proto.InterfaceChangeSpec
}

// Unplug is what leaving a network takes: the guest applies Change, then
// the VM loses the NIC with address MAC.
type Unplug struct {
	MAC    string
	Change proto.InterfaceChangeSpec
}

// ConnectRunning connects the attached (running) container containerID
// to the network cfg.NetworkID (or named name), as Configure returned it:
// an address, a TAP on the network's bridge, the container's names in
// the network's DNS, and the next interface name. The record is written
// before the TAP is made. On error nothing is left; after success,
// DisconnectRunning undoes it.
func (m *Manager) ConnectRunning(ctx context.Context, containerID, name string, cfg *network.EndpointSettings) (_ *Plug, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, ok := m.sandboxes[containerID]
	if !ok {
		return nil, fmt.Errorf("container %s has no network attachment: %w", short(containerID), errdefs.ErrFailedPrecondition)
	}
	if cfg == nil {
		cfg = &network.EndpointSettings{}
	}
	n, ok := m.nets[cfg.NetworkID]
	if !ok {
		if n, err = m.lookupLocked(name); err != nil {
			return nil, err
		}
	}
	if n.pool == nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("cannot connect a running container to network %s", n.rec.Name))
	}
	for _, ep := range sb.rec.Endpoints {
		if ep.NetworkID == n.rec.ID {
			return nil, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("endpoint with name %s already exists in network %s", sb.rec.Name, n.rec.Name))
		}
	}
	tap, ok := freeTap(containerID, sb.rec.Endpoints)
	if !ok {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("a container can join at most %d networks", maxInterfaces))
	}
	var addr netip.Addr
	if cfg.IPAMConfig != nil && cfg.IPAMConfig.IPv4Address.IsValid() {
		addr = cfg.IPAMConfig.IPv4Address
		if err := n.pool.claim(addr, containerID); err != nil {
			return nil, err
		}
	} else if addr, err = n.pool.allocate(containerID); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.pool.release(addr, containerID)
		}
	}()
	epID, err := newID()
	if err != nil {
		return nil, err
	}
	mac := macFor(addr).String()
	if len(cfg.MacAddress) > 0 {
		mac = cfg.MacAddress.String()
	}
	next := nextIface(sb.rec)
	ep := endpointRecord{
		Network: n.rec.Name, NetworkID: n.rec.ID, EndpointID: epID, Tap: tap, MAC: mac, Addr: addr,
		Aliases: slices.Clone(cfg.Aliases), Iface: fmt.Sprintf("eth%d", next),
	}
	if n.rec.Name != BridgeName {
		ep.DNSNames = dnsNames(sb.rec.Name, cfg.Aliases, containerID, sb.rec.Hostname)
	}
	// As dockerd: the new network carries the default route only when
	// none of the container's networks did.
	if !slices.ContainsFunc(sb.rec.Endpoints, func(e endpointRecord) bool { return e.Gateway }) && !n.rec.Internal {
		ep.Gateway = true
	}
	rec := sb.rec
	rec.Endpoints = append(slices.Clone(sb.rec.Endpoints), ep)
	rec.NextIface = next + 1
	var resolv, dnsServer string
	if !rec.DNSServer.IsValid() && n.rec.Name != BridgeName {
		// The first user-defined network brings the embedded DNS, and
		// dockerd rewrites resolv.conf for it.
		rec.DNSServer = n.rec.Gateway
		dnsServer = m.dns.address(rec.DNSServer)
		host, _ := os.ReadFile(m.opts.ResolvConf)
		resolv = embeddedResolvConf(string(host), rec.DNSSearch, rec.DNSOptions)
	}
	if err := writeJSON(m.sandboxPath(containerID), rec); err != nil {
		return nil, err
	}
	if err := m.links.addTap(tap, n.rec.Bridge); err != nil {
		if werr := writeJSON(m.sandboxPath(containerID), sb.rec); werr != nil {
			m.log.Error("restore a container's network record", "container", short(containerID), "err", werr)
		}
		return nil, err
	}
	sb.rec = rec
	m.dns.add(containerID, []endpointRecord{ep})
	ifc := proto.InterfaceSpec{MAC: mac, Name: ep.Iface, Address: netip.PrefixFrom(addr, n.rec.Subnet.Bits()).String(), MTU: n.mtu()}
	if ep.Gateway {
		ifc.Gateway = n.rec.Gateway.String()
	}
	m.log.Info("running container connected", "container", short(containerID), "network", n.rec.Name, "iface", ep.Iface, "tap", tap)
	return &Plug{
		Net: vmm.Net{Tap: tap, MAC: mac},
		Change: proto.InterfaceChangeSpec{
			Interface:  ifc,
			HostsEntry: hostsLine(sb.rec.Hostname, sb.rec.Domainname, addr),
			ResolvConf: resolv,
			DNSServer:  dnsServer,
		},
	}, nil
}

// Unplugging says what taking the attached container containerID off the
// network named name asks of its guest and VM; nothing changes yet. The
// error wraps errdefs.ErrNotFound when the container is not on it.
func (m *Manager) Unplugging(containerID, name string) (*Unplug, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.leavePlanLocked(containerID, name)
	if err != nil {
		return nil, err
	}
	return &p.unplug, nil
}

// DisconnectRunning releases what ConnectRunning took, or the endpoint of
// a network the container booted with, once its NIC is gone: the TAP,
// the address, the DNS names. The default route and the published ports
// move to another network when the endpoint carried them, as the guest
// was told by Unplugging.
func (m *Manager) DisconnectRunning(ctx context.Context, containerID, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.leavePlanLocked(containerID, name)
	if err != nil {
		return err
	}
	sb := m.sandboxes[containerID]
	ep := sb.rec.Endpoints[p.index]
	rec := sb.rec
	rec.Endpoints = slices.Delete(slices.Clone(sb.rec.Endpoints), p.index, p.index+1)
	if p.gateway >= 0 {
		g := p.gateway
		if g > p.index {
			g--
		}
		rec.Endpoints[g].Gateway = true
	}
	rec.DNSServer = p.dnsServer
	m.dns.removeEndpoint(containerID, ep.NetworkID)
	var errs []error
	if err := m.links.deleteLink(ep.Tap); err != nil {
		errs = append(errs, err)
	}
	if n, ok := m.nets[ep.NetworkID]; ok && n.pool != nil {
		n.pool.release(ep.Addr, containerID)
	}
	if err := writeJSON(m.sandboxPath(containerID), rec); err != nil {
		errs = append(errs, err)
	}
	sb.rec = rec
	if ep.Gateway && len(sb.rec.Ports) > 0 {
		// The published ports forward to the address that carries the
		// default route, which just changed.
		sb.closeProxies()
		if err := m.restoreSandboxLocked(ctx, sb); err != nil {
			errs = append(errs, fmt.Errorf("move published ports: %w", err))
		}
	}
	m.log.Info("running container disconnected", "container", short(containerID), "network", ep.Network, "iface", ep.Iface)
	return errors.Join(errs...)
}

// leavePlan is what leaving one network changes.
type leavePlan struct {
	index int // of the endpoint that goes
	// gateway is the index of the endpoint that takes over the default
	// route, or -1.
	gateway   int
	dnsServer netip.Addr // the container's DNS server afterwards
	unplug    Unplug
}

func (m *Manager) leavePlanLocked(containerID, name string) (leavePlan, error) {
	sb, ok := m.sandboxes[containerID]
	if !ok {
		return leavePlan{}, fmt.Errorf("container %s has no network attachment: %w", short(containerID), errdefs.ErrNotFound)
	}
	eps := sb.rec.Endpoints
	i := slices.IndexFunc(eps, func(e endpointRecord) bool { return e.Network == name })
	if i < 0 {
		return leavePlan{}, fmt.Errorf("container %s is not on network %s: %w", short(containerID), name, errdefs.ErrNotFound)
	}
	ep := eps[i]
	p := leavePlan{index: i, gateway: -1, dnsServer: sb.rec.DNSServer}
	p.unplug = Unplug{MAC: ep.MAC, Change: proto.InterfaceChangeSpec{
		Interface:  proto.InterfaceSpec{MAC: ep.MAC, Name: ep.Iface},
		HostsEntry: hostsLine(sb.rec.Hostname, sb.rec.Domainname, ep.Addr),
	}}
	rest := slices.Delete(slices.Clone(eps), i, i+1)
	if ep.Gateway {
		for j, e := range eps {
			if j == i {
				continue
			}
			if n, ok := m.nets[e.NetworkID]; ok && !n.rec.Internal {
				p.gateway = j
				iface := e.Iface
				if iface == "" {
					iface = fmt.Sprintf("eth%d", j) // a record from before names were kept
				}
				p.unplug.Change.DefaultRoute = &proto.DefaultRoute{Interface: iface, Gateway: n.rec.Gateway.String()}
				break
			}
		}
	}
	if n, ok := m.nets[ep.NetworkID]; ok && sb.rec.DNSServer.IsValid() && n.rec.Gateway == sb.rec.DNSServer {
		// The server the container asks goes away with this network.
		host, _ := os.ReadFile(m.opts.ResolvConf)
		p.dnsServer = firstDNSServer(m.nets, rest)
		if p.dnsServer.IsValid() {
			p.unplug.Change.ResolvConf = embeddedResolvConf(string(host), sb.rec.DNSSearch, sb.rec.DNSOptions)
			p.unplug.Change.DNSServer = m.dns.address(p.dnsServer)
		} else {
			p.unplug.Change.ResolvConf = bridgeResolvConf(string(host), sb.rec.DNS, sb.rec.DNSSearch, sb.rec.DNSOptions)
		}
	}
	return p, nil
}

// firstDNSServer is the DNS server of a container on eps: the gateway of
// its first user-defined network, or none.
func firstDNSServer(nets map[string]*netState, eps []endpointRecord) netip.Addr {
	for _, e := range eps {
		if n, ok := nets[e.NetworkID]; ok && n.pool != nil && n.rec.Name != BridgeName {
			return n.rec.Gateway
		}
	}
	return netip.Addr{}
}

// freeTap is the container's first TAP name no endpoint uses.
func freeTap(containerID string, eps []endpointRecord) (string, bool) {
	for i := range maxInterfaces {
		name := tapName(containerID, i)
		if !slices.ContainsFunc(eps, func(e endpointRecord) bool { return e.Tap == name }) {
			return name, true
		}
	}
	return "", false
}

// nextIface is the index of the container's next interface name. A
// record from before interfaces were counted has eth0..ethN-1.
func nextIface(rec sandboxRecord) int {
	return max(rec.NextIface, len(rec.Endpoints))
}
