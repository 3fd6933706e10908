package network

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/network"

	"github.com/husk-vm/husk/runtime/timestamp"
)

// userSubnetBits is the size of the subnets user-defined networks get
// from the pool.
const userSubnetBits = 24

// Create makes a user-defined bridge network: its record, its bridge, its
// DNS server and its firewall rules.
func (m *Manager) Create(ctx context.Context, req network.CreateRequest) (network.CreateResponse, error) {
	if req.Name == "" {
		return network.CreateResponse{}, errdefs.ErrInvalidArgument.WithMessage("network name must not be empty")
	}
	// dockerd refuses its predefined names before anything else, whether
	// or not it has such a network (husk has no host network, and
	// "default" is the default network mode's name).
	switch req.Name {
	case "bridge", "host", "none", "default":
		return network.CreateResponse{}, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("operation is not permitted on predefined %s network", req.Name))
	}
	switch req.Driver {
	case "", driverBridge:
	case "overlay":
		// husk is never a swarm node: dockerd's answer off a swarm.
		return network.CreateResponse{}, errdefs.ErrPermissionDenied.WithMessage(`This node is not a swarm manager. Use "docker swarm init" or "docker swarm join" to connect this node to swarm and try again.`)
	case "host", "null":
		// Their one network each is predefined, as under dockerd.
		return network.CreateResponse{}, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("only one instance of %q network is allowed", req.Driver))
	case "macvlan", "ipvlan":
		// dockerd's own drivers, which husk's VMs cannot use.
		return network.CreateResponse{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("husk supports only the bridge network driver, not %q", req.Driver))
	default:
		// dockerd looks any other name up as a plugin.
		return network.CreateResponse{}, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("plugin %q not found", req.Driver))
	}
	if req.Scope == "swarm" {
		return network.CreateResponse{}, errdefs.ErrPermissionDenied.WithMessage("cannot create a swarm scoped network when swarm is not active")
	}
	if req.EnableIPv6 != nil && *req.EnableIPv6 {
		return network.CreateResponse{}, errdefs.ErrInvalidArgument.WithMessage("husk does not support IPv6 networks yet")
	}
	if req.ConfigOnly || req.ConfigFrom != nil && req.ConfigFrom.Network != "" || req.Ingress {
		return network.CreateResponse{}, errdefs.ErrInvalidArgument.WithMessage("husk does not support config-only, config-from or ingress networks")
	}
	if err := ValidateIPAM(PoolsOf(req.IPAM), false); err != nil {
		return network.CreateResponse{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.byNameLocked(req.Name); n != nil {
		return network.CreateResponse{}, errdefs.ErrConflict.WithMessage(fmt.Sprintf("network with name %s already exists", req.Name))
	}
	addr, err := m.chooseAddressingLocked(req.IPAM)
	if err != nil {
		return network.CreateResponse{}, err
	}
	var ipamOptions map[string]string
	if req.IPAM != nil {
		ipamOptions = maps.Clone(req.IPAM.Options)
	}
	aux, err := auxAddresses(req.IPAM)
	if err != nil {
		return network.CreateResponse{}, err
	}
	id, err := newID()
	if err != nil {
		return network.CreateResponse{}, err
	}
	rec := netRecord{
		ID: id, Name: req.Name, Driver: driverBridge, Created: time.Now().UTC(),
		Subnet: addr.subnet, Gateway: addr.gateway, IPRange: addr.ipRange, AuxAddresses: aux, Bridge: bridgePrefix + "-" + id[:10],
		AutoSubnet: addr.autoSubnet, AutoGateway: addr.autoGateway, IPAMOptions: ipamOptions,
		Internal: req.Internal, Attachable: req.Attachable,
		Labels: maps.Clone(req.Labels), Options: maps.Clone(req.Options),
	}
	if rec.Labels == nil {
		rec.Labels = map[string]string{}
	}
	if rec.Options == nil {
		rec.Options = map[string]string{}
	}
	st, err := newNetState(rec)
	if err != nil {
		return network.CreateResponse{}, err
	}
	if err := m.saveNetwork(rec); err != nil {
		return network.CreateResponse{}, err
	}
	m.nets[id] = st
	if err := m.bridgeUpLocked(st); err != nil {
		m.dropNetworkLocked(st)
		return network.CreateResponse{}, err
	}
	if err := m.programFirewallLocked(); err != nil {
		m.dropNetworkLocked(st)
		return network.CreateResponse{}, err
	}
	m.publish(events.ActionCreate, rec)
	m.log.Info("network created", "name", rec.Name, "id", short(id), "subnet", addr.subnet, "bridge", rec.Bridge)
	return network.CreateResponse{ID: id}, nil
}

// addressing is what a network's IPv4 IPAM config comes to. The auto
// fields say which parts husk chose, which inspect leaves out and a static
// --ip may not rely on.
type addressing struct {
	subnet, ipRange         netip.Prefix
	gateway                 netip.Addr
	autoSubnet, autoGateway bool
}

// chooseAddressingLocked takes the user's subnet, ip-range and gateway,
// which ValidateIPAM has checked, or the first free /24 of the pool. A
// gateway not given is allocated as libnetwork allocates it, like any
// other address: the first of the range, else of the subnet.
func (m *Manager) chooseAddressingLocked(ipam *network.IPAM) (addressing, error) {
	if ipam != nil && ipam.Driver != "" && ipam.Driver != "default" {
		return addressing{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("husk supports only the default IPAM driver, not %q", ipam.Driver))
	}
	if ipam != nil && len(ipam.Config) > 1 {
		return addressing{}, errdefs.ErrInvalidArgument.WithMessage("husk supports one IPv4 subnet per network")
	}
	var c network.IPAMConfig
	if ipam != nil && len(ipam.Config) == 1 {
		c = ipam.Config[0]
	}
	if !c.Subnet.IsValid() {
		subnet, err := m.freeSubnetLocked()
		if err != nil {
			return addressing{}, err
		}
		return addressing{subnet: subnet, gateway: subnet.Addr().Next(), autoSubnet: true}, nil
	}
	subnet := c.Subnet
	if !subnet.Addr().Is4() {
		return addressing{}, errdefs.ErrInvalidArgument.WithMessage("husk does not support IPv6 networks yet")
	}
	for _, n := range m.nets {
		if n.rec.Subnet.IsValid() && n.rec.Subnet.Overlaps(subnet) {
			return addressing{}, errdefs.ErrPermissionDenied.WithMessage("Pool overlaps with other one on this address space")
		}
	}
	a := addressing{subnet: subnet, gateway: c.Gateway, ipRange: c.IPRange}
	if !a.gateway.IsValid() {
		a.gateway = firstInRange(subnet, a.ipRange)
		a.autoGateway = true
	}
	return a, nil
}

// freeSubnetLocked is the pool's first /24 no network overlaps.
func (m *Manager) freeSubnetLocked() (netip.Prefix, error) {
	base := m.opts.Pool.Masked()
	for p := netip.PrefixFrom(base.Addr(), userSubnetBits); base.Contains(p.Addr()); p = netip.PrefixFrom(lastAddr(p).Next(), userSubnetBits) {
		free := true
		for _, n := range m.nets {
			if n.rec.Subnet.IsValid() && n.rec.Subnet.Overlaps(p) {
				free = false
				break
			}
		}
		if free {
			return p, nil
		}
		if !lastAddr(p).Next().IsValid() {
			break
		}
	}
	return netip.Prefix{}, errdefs.ErrUnavailable.WithMessage("could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the network")
}

// auxOwner prefixes the pool's owner of an --aux-address.
const auxOwner = "aux:"

// auxAddresses checks that no --aux-address is taken twice, as libnetwork
// does; ValidateIPAM has checked that each is in the subnet.
func auxAddresses(ipam *network.IPAM) (map[string]netip.Addr, error) {
	if ipam == nil || len(ipam.Config) == 0 || len(ipam.Config[0].AuxAddress) == 0 {
		return nil, nil
	}
	taken := map[netip.Addr]bool{}
	for _, name := range slices.Sorted(maps.Keys(ipam.Config[0].AuxAddress)) {
		a := ipam.Config[0].AuxAddress[name]
		if taken[a] {
			return nil, fmt.Errorf("failed to allocate secondary ip address (%s:%s): Address already in use", name, a)
		}
		taken[a] = true
	}
	return maps.Clone(ipam.Config[0].AuxAddress), nil
}

// dropNetworkLocked forgets a network and takes its host side down.
func (m *Manager) dropNetworkLocked(n *netState) {
	m.dns.stop(n.rec.ID)
	if n.rec.Bridge != "" {
		if err := m.links.deleteLink(n.rec.Bridge); err != nil {
			m.log.Warn("delete bridge", "bridge", n.rec.Bridge, "err", err)
		}
	}
	delete(m.nets, n.rec.ID)
	if err := removeFile(m.netFile(n.rec.ID)); err != nil {
		m.log.Warn("remove network record", "network", n.rec.Name, "err", err)
	}
}

func (m *Manager) netFile(id string) string { return m.netDir() + "/" + id + ".json" }

// Remove deletes a user-defined network no running container is on.
func (m *Manager) Remove(ctx context.Context, ref string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookupLocked(ref)
	if err != nil {
		return err
	}
	if n.rec.predefined() {
		return errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("%s is a pre-defined network and cannot be removed", n.rec.Name))
	}
	if m.endpointsLocked(n.rec.ID) > 0 {
		return errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("error while removing network: network %s id %s has active endpoints", n.rec.Name, n.rec.ID))
	}
	m.dropNetworkLocked(n)
	if err := m.programFirewallLocked(); err != nil {
		return err
	}
	m.publish(events.ActionDestroy, n.rec)
	m.log.Info("network removed", "name", n.rec.Name, "id", short(n.rec.ID))
	return nil
}

func (m *Manager) endpointsLocked(networkID string) int {
	count := 0
	for _, sb := range m.sandboxes {
		for _, ep := range sb.rec.Endpoints {
			if ep.NetworkID == networkID {
				count++
			}
		}
	}
	return count
}

// Prune removes every user-defined network without endpoints that
// matches filters (label, until) and returns their names.
func (m *Manager) Prune(ctx context.Context, filters map[string][]string) ([]string, error) {
	for k := range filters {
		if k != "label" && k != "label!" && k != "until" {
			return nil, errdefs.ErrInvalidArgument.WithMessage("invalid filter '" + k + "'")
		}
	}
	var until time.Time
	if vs := filters["until"]; len(vs) > 1 {
		return nil, errdefs.ErrInvalidArgument.WithMessage("more than one until filter specified")
	} else if len(vs) == 1 {
		t, err := timestamp.Parse(vs[0], time.Now())
		if err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
		until = t
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var removed []string
	for _, n := range m.sortedNets() {
		if n.rec.predefined() || m.endpointsLocked(n.rec.ID) > 0 || !matchLabels(filters["label"], n.rec.Labels) {
			continue
		}
		if !until.IsZero() && n.rec.Created.After(until) {
			continue
		}
		if excl := filters["label!"]; len(excl) > 0 && matchAnyLabel(excl, n.rec.Labels) {
			continue
		}
		m.dropNetworkLocked(n)
		m.publish(events.ActionDestroy, n.rec)
		removed = append(removed, n.rec.Name)
	}
	if m.opts.Events != nil {
		m.opts.Events.Publish(events.NetworkEventType, events.ActionPrune, "", map[string]string{"reclaimed": "0"})
	}
	if len(removed) > 0 {
		if err := m.programFirewallLocked(); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// List answers GET /networks.
func (m *Manager) List(ctx context.Context, filters map[string][]string) ([]network.Summary, error) {
	for k := range filters {
		switch k {
		case "name", "id", "label", "driver", "type", "scope", "dangling":
		default:
			return nil, errdefs.ErrInvalidArgument.WithMessage("invalid filter '" + k + "'")
		}
	}
	if err := validateListFilters(filters); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []network.Summary{}
	for _, n := range m.sortedNets() {
		if !m.matchLocked(n, filters) {
			continue
		}
		out = append(out, network.Summary{Network: m.describeLocked(n)})
	}
	return out, nil
}

func (m *Manager) matchLocked(n *netState, f map[string][]string) bool {
	anyOf := func(key string, ok func(string) bool) bool {
		if len(f[key]) == 0 {
			return true
		}
		for _, v := range f[key] {
			if ok(v) {
				return true
			}
		}
		return false
	}
	return anyOf("name", func(v string) bool { return matchPattern(v, n.rec.Name) }) &&
		anyOf("id", func(v string) bool { return matchPattern(v, n.rec.ID) }) &&
		anyOf("driver", func(v string) bool { return n.rec.Driver == v }) &&
		anyOf("scope", func(v string) bool { return v == "local" }) &&
		anyOf("type", func(v string) bool {
			return v == "builtin" && n.rec.predefined() || v == "custom" && !n.rec.predefined()
		}) &&
		anyOf("dangling", func(v string) bool {
			dangling := !n.rec.predefined() && m.endpointsLocked(n.rec.ID) == 0
			return (v == "true" || v == "1") == dangling
		}) &&
		matchLabels(f["label"], n.rec.Labels)
}

// validateListFilters refuses, in dockerd's words, values of the type and
// dangling filters that it refuses. The type filter's error is a plain
// one (a 500), as dockerd's is.
func validateListFilters(filters map[string][]string) error {
	if vals := filters["dangling"]; len(vals) > 0 {
		if len(vals) > 1 {
			return errdefs.ErrInvalidArgument.WithMessage(`got more than one value for filter key "dangling"`)
		}
		switch vals[0] {
		case "0", "false", "1", "true":
		default:
			return errdefs.ErrInvalidArgument.WithMessage(`invalid value for filter 'dangling', must be "true" (or "1"), or "false" (or "0")`)
		}
	}
	for _, v := range filters["type"] {
		if v != "builtin" && v != "custom" {
			return fmt.Errorf("invalid filter: 'type'='%s'", v)
		}
	}
	return nil
}

// matchPattern is dockerd's filter match for names and IDs: the value
// itself, or a regular expression found in it.
func matchPattern(pattern, s string) bool {
	if pattern == s {
		return true
	}
	re, err := regexp.Compile(pattern)
	return err == nil && re.MatchString(s)
}

// matchLabels: every "k" or "k=v" must match.
func matchLabels(want []string, have map[string]string) bool {
	for _, w := range want {
		k, v, hasValue := strings.Cut(w, "=")
		got, ok := have[k]
		if !ok || hasValue && got != v {
			return false
		}
	}
	return true
}

func matchAnyLabel(want []string, have map[string]string) bool {
	for _, w := range want {
		if matchLabels([]string{w}, have) {
			return true
		}
	}
	return false
}

// Inspect answers GET /networks/{id}: the network and the running
// containers on it.
func (m *Manager) Inspect(ctx context.Context, ref string) (network.Inspect, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookupLocked(ref)
	if err != nil {
		return network.Inspect{}, err
	}
	out := network.Inspect{Network: m.describeLocked(n), Containers: map[string]network.EndpointResource{}}
	for id, sb := range m.sandboxes {
		for _, ep := range sb.rec.Endpoints {
			if ep.NetworkID != n.rec.ID {
				continue
			}
			mac, _ := parseMAC(ep.MAC)
			out.Containers[id] = network.EndpointResource{
				Name: sb.rec.Name, EndpointID: ep.EndpointID, MacAddress: mac,
				IPv4Address: netip.PrefixFrom(ep.Addr, n.rec.Subnet.Bits()),
			}
		}
	}
	return out, nil
}

func (m *Manager) describeLocked(n *netState) network.Network {
	nw := network.Network{
		Name: n.rec.Name, ID: n.rec.ID, Created: n.rec.Created, Scope: "local", Driver: n.rec.Driver,
		EnableIPv4: n.rec.Driver == driverBridge, Internal: n.rec.Internal, Attachable: n.rec.Attachable,
		IPAM:    network.IPAM{Driver: "default", Options: maps.Clone(n.rec.IPAMOptions), Config: []network.IPAMConfig{}},
		Options: maps.Clone(n.rec.Options), Labels: maps.Clone(n.rec.Labels),
	}
	if n.rec.Subnet.IsValid() {
		c := network.IPAMConfig{Subnet: n.rec.Subnet, IPRange: n.rec.IPRange, Gateway: n.rec.Gateway, AuxAddress: maps.Clone(n.rec.AuxAddresses)}
		if n.rec.AutoGateway {
			// dockerd shows a user's subnet as configured.
			c.Gateway = netip.Addr{}
		}
		nw.IPAM.Config = append(nw.IPAM.Config, c)
	}
	if nw.Options == nil {
		nw.Options = map[string]string{}
	}
	if nw.Labels == nil {
		nw.Labels = map[string]string{}
	}
	return nw
}

// Resolve returns a network's ID and name, for the API's connect and
// disconnect.
func (m *Manager) Resolve(ref string) (id, name string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookupLocked(ref)
	if err != nil {
		return "", "", err
	}
	return n.rec.ID, n.rec.Name, nil
}
