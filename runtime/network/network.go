// Package network connects containers' VMs to host networks, as dockerd's
// libnetwork bridge driver connects containers: one Linux bridge per
// network in the daemon's network namespace ("husk0" for the default
// network "bridge", "husk-<id>" for user-defined ones), one TAP per VM
// interface enslaved to it, addresses from a per-network pool, egress NAT
// and inter-network isolation in one nftables table ("husk"), published
// ports through a userland proxy, and a DNS server for user-defined
// networks on each network's gateway address.
//
// The guest is configured by its agent from what Attach returns (address,
// default route, /etc/hosts, /etc/resolv.conf); the host never reaches
// into the guest.
//
// Choices:
//   - Default subnet 10.123.0.0/16 (flag --bip): outside Docker's default
//     address pools (172.17-172.31/16 and 192.168/16, so husk and dockerd
//     can share a host), Podman's (10.88/16, 10.89/16 and up), libvirt's
//     192.168.122/24 and the usual Kubernetes pod and service ranges
//     (10.42, 10.96-10.111, 10.244). User-defined networks take /24s from
//     10.124.0.0/14.
//   - Published ports use a userland proxy in huskd (like docker-proxy)
//     rather than DNAT: a VM is not reachable from 127.0.0.1 through DNAT
//     without route_localnet and hairpin rules, and the proxy needs neither
//     a firewall nor kernel tunables, works the same with or without
//     nftables, and closes with the daemon. The cost is a copy through
//     huskd and that the container sees the gateway as the peer address.
//   - Addresses are the lowest free one, like libnetwork's default IPAM;
//     a container holds its addresses from start to stop, as in dockerd.
//   - MACs derive from the address (02:42:a:b:c:d), as in dockerd.
//
// Nothing here is hand-rolled where a library exists: rtnetlink through
// github.com/vishvananda/netlink, nf_tables through
// github.com/google/nftables, DNS through github.com/miekg/dns.
package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/renameio/v2"
	"github.com/moby/moby/api/types/events"
)

// Names of the predefined networks, as dockerd calls them.
const (
	BridgeName = "bridge"
	NoneName   = "none"
	HostName   = "host"
)

// Drivers.
const (
	driverBridge = "bridge"
	driverNull   = "null"
)

// DefaultBridgeIP is the default network's gateway address and subnet.
var DefaultBridgeIP = netip.MustParsePrefix("10.123.0.1/16")

// DefaultPool is where user-defined networks get their /24 subnets.
var DefaultPool = netip.MustParsePrefix("10.124.0.0/14")

// defaultBridgeDevice is the default network's bridge, like docker0.
const defaultBridgeDevice = "husk0"

// Options configure a Manager.
type Options struct {
	// Root holds the manager's records, e.g. /var/lib/husk/network.
	Root string
	// BridgeIP is the default bridge's gateway address with the subnet's
	// length (dockerd's --bip); DefaultBridgeIP when zero.
	BridgeIP netip.Prefix
	// Pool is carved into /24s for user-defined networks without a
	// --subnet; DefaultPool when zero.
	Pool netip.Prefix
	// ResolvConf is the host's resolver configuration; /etc/resolv.conf
	// when empty.
	ResolvConf string
	Logger     *slog.Logger
	// Events, when set, hears of networks created, removed and pruned,
	// for GET /events.
	Events EventSink
}

// EventSink receives network events; Publish must not block.
type EventSink interface {
	Publish(typ events.Type, action events.Action, id string, attrs map[string]string)
}

// publish reports what happened to a network as dockerd does: the
// network's ID, its name and its driver.
func (m *Manager) publish(action events.Action, rec netRecord) {
	if m.opts.Events != nil {
		m.opts.Events.Publish(events.NetworkEventType, action, rec.ID, map[string]string{"name": rec.Name, "type": rec.Driver})
	}
}

// netRecord is a network as persisted.
type netRecord struct {
	ID      string
	Name    string
	Driver  string
	Created time.Time
	Subnet  netip.Prefix `json:",omitzero"`
	Gateway netip.Addr   `json:",omitzero"`
	// IPRange is --ip-range: the part of Subnet addresses are handed
	// out from (a static --ip may be anywhere in Subnet).
	IPRange netip.Prefix `json:",omitzero"`
	// AuxAddresses are --aux-address: addresses in Subnet no container
	// is given, shown by inspect.
	AuxAddresses map[string]netip.Addr `json:",omitempty"`
	// AutoSubnet is set when husk chose Subnet: dockerd then shows the
	// gateway it chose and refuses a static --ip. AutoGateway is set when
	// husk chose the gateway of a user's subnet, which dockerd leaves out
	// of inspect. Records written before them read as the user's own.
	AutoSubnet  bool `json:",omitempty"`
	AutoGateway bool `json:",omitempty"`
	// IPAMOptions are the create request's, shown back as given (the CLI
	// sends {}).
	IPAMOptions map[string]string `json:",omitzero"`
	Bridge      string            `json:",omitempty"`
	Internal    bool              `json:",omitempty"`
	Attachable  bool              `json:",omitempty"`
	Labels      map[string]string
	Options     map[string]string
}

// predefined reports whether users may not remove the network.
func (r *netRecord) predefined() bool {
	return r.Name == BridgeName || r.Name == NoneName || r.Name == HostName
}

// netState is one network in memory.
type netState struct {
	rec  netRecord
	pool *pool // nil for the null driver
}

// mtuOption is the bridge driver's option for its interfaces' MTU.
const mtuOption = "com.docker.network.driver.mtu"

// mtu is the MTU the network's option gives its containers' interfaces,
// as dockerd's bridge driver gives its veths; 0 (the device's own) when
// it gives none that is usable.
func (n *netState) mtu() int {
	v, err := strconv.Atoi(n.rec.Options[mtuOption])
	if err != nil || v < 68 || v > 65535 {
		return 0
	}
	return v
}

// Manager owns networks and the containers' connections to them.
type Manager struct {
	opts  Options
	log   *slog.Logger
	links links
	fw    firewall

	mu        sync.Mutex
	nets      map[string]*netState // by ID
	sandboxes map[string]*sandbox  // by container ID
	nat       bool                 // egress NAT is programmed
	dns       *dnsServers
}

// New loads the networks and container connections under opts.Root,
// creating the predefined networks the first time. It touches no host
// interface: Start does.
func New(opts Options) (*Manager, error) {
	return newManager(opts, netlinkLinks{}, nftFirewall{})
}

func newManager(opts Options, l links, fw firewall) (*Manager, error) {
	if !opts.BridgeIP.IsValid() {
		opts.BridgeIP = DefaultBridgeIP
	}
	if !opts.Pool.IsValid() {
		opts.Pool = DefaultPool
	}
	if opts.ResolvConf == "" {
		opts.ResolvConf = "/etc/resolv.conf"
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{opts: opts, log: log, links: l, fw: fw,
		nets: map[string]*netState{}, sandboxes: map[string]*sandbox{}}
	m.dns = newDNSServers(m, log)
	for _, d := range []string{m.netDir(), m.sandboxDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	if err := m.loadNetworks(); err != nil {
		return nil, err
	}
	if err := m.loadSandboxes(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Manager) netDir() string     { return filepath.Join(m.opts.Root, "networks") }
func (m *Manager) sandboxDir() string { return filepath.Join(m.opts.Root, "containers") }

func (m *Manager) loadNetworks() error {
	entries, err := os.ReadDir(m.netDir())
	if err != nil {
		return fmt.Errorf("list networks: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		var rec netRecord
		if err := readJSON(filepath.Join(m.netDir(), e.Name()), &rec); err != nil {
			m.log.Error("skipping unreadable network record", "file", e.Name(), "err", err)
			continue
		}
		st, err := newNetState(rec)
		if err != nil {
			m.log.Error("skipping network with a bad subnet", "network", rec.Name, "err", err)
			continue
		}
		m.nets[rec.ID] = st
	}
	// The default bridge follows --bip; the record keeps only its ID.
	bridgeSubnet := m.opts.BridgeIP.Masked()
	want := []netRecord{
		{Name: BridgeName, Driver: driverBridge, Subnet: bridgeSubnet, Gateway: m.opts.BridgeIP.Addr(), Bridge: defaultBridgeDevice,
			Options: map[string]string{
				"com.docker.network.bridge.default_bridge":       "true",
				"com.docker.network.bridge.enable_icc":           "true",
				"com.docker.network.bridge.enable_ip_masquerade": "true",
				"com.docker.network.bridge.host_binding_ipv4":    "0.0.0.0",
				"com.docker.network.bridge.name":                 defaultBridgeDevice,
				mtuOption:                                        "1500",
			}},
		{Name: NoneName, Driver: driverNull, Options: map[string]string{}},
	}
	for _, w := range want {
		existing := m.byNameLocked(w.Name)
		if existing != nil && existing.rec.Subnet == w.Subnet && existing.rec.Gateway == w.Gateway {
			continue
		}
		w.Labels = map[string]string{}
		if existing != nil {
			w.ID, w.Created = existing.rec.ID, existing.rec.Created
		} else {
			id, err := newID()
			if err != nil {
				return err
			}
			w.ID, w.Created = id, time.Now().UTC()
		}
		st, err := newNetState(w)
		if err != nil {
			return fmt.Errorf("network %s: %w", w.Name, err)
		}
		if err := m.saveNetwork(w); err != nil {
			return err
		}
		m.nets[w.ID] = st
	}
	return nil
}

func newNetState(rec netRecord) (*netState, error) {
	st := &netState{rec: rec}
	if rec.Driver == driverBridge {
		p, err := newPool(rec.Subnet, rec.Gateway, rec.IPRange)
		if err != nil {
			return nil, err
		}
		for name, a := range rec.AuxAddresses {
			if a == rec.Subnet.Masked().Addr() || a == lastAddr(rec.Subnet) {
				continue // never handed out anyway
			}
			if err := p.claim(a, auxOwner+name); err != nil {
				return nil, fmt.Errorf("failed to allocate secondary ip address (%s:%s): %w", name, a, err)
			}
		}
		st.pool = p
	}
	return st, nil
}

func (m *Manager) saveNetwork(rec netRecord) error {
	return writeJSON(filepath.Join(m.netDir(), rec.ID+".json"), rec)
}

// byNameLocked finds a network by exact name. Callers hold m.mu (or own m
// alone).
func (m *Manager) byNameLocked(name string) *netState {
	for _, n := range m.nets {
		if n.rec.Name == name {
			return n
		}
	}
	return nil
}

// lookupLocked resolves a network as dockerd does: full ID, exact name,
// then a unique ID prefix.
func (m *Manager) lookupLocked(ref string) (*netState, error) {
	if n, ok := m.nets[ref]; ok {
		return n, nil
	}
	if n := m.byNameLocked(ref); n != nil {
		return n, nil
	}
	var found []*netState
	for id, n := range m.nets {
		if ref != "" && strings.HasPrefix(id, ref) {
			found = append(found, n)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("network %s not found", ref))
	}
	return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("network %s is ambiguous (%d matches found based on ID prefix)", ref, len(found)))
}

// Start brings the host side up: the bridge of every network, the
// firewall, and the connections of containers that still run (alive
// says which), whose TAPs the running VMs hold and whose published ports
// listen again. Everything else a previous daemon left behind goes: the
// connections of containers that are gone, TAPs nobody owns, bridges of
// networks that no longer exist.
func (m *Manager) Start(ctx context.Context, alive func(containerID string) bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.sortedNets() {
		if n.rec.Bridge == "" {
			continue
		}
		if err := m.bridgeUpLocked(n); err != nil {
			return err
		}
	}
	if err := m.programFirewallLocked(); err != nil {
		return err
	}
	for id, sb := range m.sandboxes {
		if alive(id) {
			if err := m.restoreSandboxLocked(ctx, sb); err != nil {
				m.log.Error("restore published ports", "container", short(id), "err", err)
			}
			continue
		}
		m.log.Info("releasing the network of a container that is gone", "container", short(id))
		m.releaseLocked(sb)
	}
	return m.sweepLocked()
}

// bridgeUpLocked makes a network's bridge and, for a user-defined
// network, starts its DNS server on the gateway address.
func (m *Manager) bridgeUpLocked(n *netState) error {
	if err := m.links.ensureBridge(n.rec.Bridge, netip.PrefixFrom(n.rec.Gateway, n.rec.Subnet.Bits()), n.mtu()); err != nil {
		return err
	}
	if n.rec.Name == BridgeName {
		return nil
	}
	if err := m.dns.serve(n.rec.ID, n.rec.Gateway); err != nil {
		// Containers still reach each other by address.
		m.log.Error("DNS server for network", "network", n.rec.Name, "addr", n.rec.Gateway, "err", err)
	}
	return nil
}

// sweepLocked deletes TAPs and bridges that no record owns.
func (m *Manager) sweepLocked() error {
	owned := map[string]bool{}
	for _, n := range m.nets {
		if n.rec.Bridge != "" {
			owned[n.rec.Bridge] = true
		}
	}
	for _, sb := range m.sandboxes {
		for _, ep := range sb.rec.Endpoints {
			owned[ep.Tap] = true
		}
	}
	var errs []error
	for _, prefix := range []string{tapPrefix, bridgePrefix} {
		found, err := m.links.list(prefix)
		if err != nil {
			return err
		}
		for name := range found {
			if owned[name] {
				continue
			}
			m.log.Info("deleting a leftover interface", "name", name)
			if err := m.links.deleteLink(name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// programFirewallLocked rewrites husk's nftables table for the current
// networks. NAT is added only when the namespace has a default route: with
// no uplink there is nowhere to masquerade to.
func (m *Manager) programFirewallLocked() error {
	uplink, err := m.links.hasUplink()
	if err != nil {
		return err
	}
	if uplink && !m.nat {
		if err := m.links.enableForwarding(); err != nil {
			return err
		}
	}
	var nets []fwNetwork
	for _, n := range m.sortedNets() {
		if n.rec.Bridge != "" {
			nets = append(nets, fwNetwork{Bridge: n.rec.Bridge, Subnet: n.rec.Subnet, Internal: n.rec.Internal})
		}
	}
	if err := m.fw.apply(nets, uplink); err != nil {
		return err
	}
	m.nat = uplink
	return nil
}

// Close takes the host side down when the daemon stops: published ports
// close, DNS servers stop, and TAPs, bridges and the firewall table go.
// Records stay: a container still attached (its VM outlived the daemon)
// is restored by the next Start.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, sb := range m.sandboxes {
		sb.closeProxies()
	}
	m.dns.closeAll()
	// A container still attached has a VM that outlived the daemon's
	// shutdown; its TAPs and bridges stay for the next Start.
	if len(m.sandboxes) == 0 {
		for _, n := range m.nets {
			if n.rec.Bridge != "" {
				if err := m.links.deleteLink(n.rec.Bridge); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if err := m.fw.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) sortedNets() []*netState {
	out := make([]*netState, 0, len(m.nets))
	for _, n := range m.nets {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rec.Name < out[j].rec.Name })
	return out
}

func newID() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// writeJSON persists v atomically: temp file, fsync, rename, fsync dir.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := renameio.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Dir(path), err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Dir(path), err)
	}
	return nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
