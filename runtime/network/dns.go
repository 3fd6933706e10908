package network

import (
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// dnsServers is huskd's DNS for user-defined networks: one server per
// network on its gateway address, port 53, UDP and TCP. It answers A
// queries for the names of the containers attached to that network (name,
// aliases, short ID, hostname) and forwards everything else to the host's
// nameservers, as dockerd's embedded DNS does from 127.0.0.11.
//
// Like dockerd's embedded DNS, a container resolves the names of every
// network it is on, whichever network's server it asks: after `docker
// network connect`, its resolv.conf still names the server of its first
// network. The server tells who asks by the source address.
//
// Names it does not know it forwards, as dockerd's embedded DNS does, to
// the asking container's --dns servers, or to the host's nameservers
// when it has none.
//
// It keeps its own table, updated on attach and detach, so a query never
// waits for the manager's lock.
type dnsServers struct {
	log        *slog.Logger
	resolvConf string
	// port is where nameservers answer: 53, but for tests.
	port string

	mu      sync.Mutex
	servers map[string]*dnsServer                       // by network ID
	names   map[string]map[string]map[string]netip.Addr // network ID → name → container ID → address
	owners  map[string]map[netip.Addr]string            // network ID → address → container ID
	joined  map[string]map[string]bool                  // container ID → its network IDs
	// upstreams are the --dns servers of the containers that have any.
	upstreams map[string][]string // container ID → addresses
}

type dnsServer struct {
	udp, tcp *dns.Server
}

func newDNSServers(m *Manager, log *slog.Logger) *dnsServers {
	return &dnsServers{log: log, resolvConf: m.opts.ResolvConf, port: "53",
		servers: map[string]*dnsServer{}, names: map[string]map[string]map[string]netip.Addr{},
		owners: map[string]map[netip.Addr]string{}, joined: map[string]map[string]bool{},
		upstreams: map[string][]string{}}
}

// address is where the server of the network whose gateway is gw
// answers, as proto.SetupSpec.DNSServer has it.
func (d *dnsServers) address(gw netip.Addr) string {
	return net.JoinHostPort(gw.String(), d.port)
}

// serve starts the server of one network on addr:53; a running one is
// kept.
func (d *dnsServers) serve(networkID string, addr netip.Addr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.servers[networkID]; ok {
		return nil
	}
	hostPort := net.JoinHostPort(addr.String(), "53")
	pc, err := net.ListenPacket("udp4", hostPort)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp4", hostPort)
	if err != nil {
		pc.Close()
		return err
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { d.answer(networkID, w, r) })
	s := &dnsServer{
		udp: &dns.Server{PacketConn: pc, Handler: h},
		tcp: &dns.Server{Listener: l, Handler: h},
	}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		go func() {
			if err := srv.ActivateAndServe(); err != nil {
				d.log.Debug("DNS server ended", "network", short(networkID), "err", err)
			}
		}()
	}
	d.servers[networkID] = s
	return nil
}

func (d *dnsServers) stop(networkID string) {
	d.mu.Lock()
	s, ok := d.servers[networkID]
	delete(d.servers, networkID)
	d.mu.Unlock()
	if ok {
		s.shutdown()
	}
}

func (s *dnsServer) shutdown() {
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		// Shutdown fails only for a server that never started; close its
		// socket all the same.
		if err := srv.Shutdown(); err != nil {
			if srv.PacketConn != nil {
				srv.PacketConn.Close()
			}
			if srv.Listener != nil {
				srv.Listener.Close()
			}
		}
	}
}

func (d *dnsServers) closeAll() {
	d.mu.Lock()
	servers := d.servers
	d.servers = map[string]*dnsServer{}
	d.mu.Unlock()
	for _, s := range servers {
		s.shutdown()
	}
}

// add publishes a container's names on the networks of its endpoints.
func (d *dnsServers) add(containerID string, eps []endpointRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ep := range eps {
		tbl := d.names[ep.NetworkID]
		if tbl == nil {
			tbl = map[string]map[string]netip.Addr{}
			d.names[ep.NetworkID] = tbl
		}
		for _, n := range ep.DNSNames {
			if tbl[n] == nil {
				tbl[n] = map[string]netip.Addr{}
			}
			tbl[n][containerID] = ep.Addr
		}
		if d.owners[ep.NetworkID] == nil {
			d.owners[ep.NetworkID] = map[netip.Addr]string{}
		}
		d.owners[ep.NetworkID][ep.Addr] = containerID
		if d.joined[containerID] == nil {
			d.joined[containerID] = map[string]bool{}
		}
		d.joined[containerID][ep.NetworkID] = true
	}
}

// setUpstreams records a container's --dns servers, which names it asks
// for and no container has are forwarded to.
func (d *dnsServers) setUpstreams(containerID string, servers []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(servers) == 0 {
		delete(d.upstreams, containerID)
		return
	}
	d.upstreams[containerID] = slices.Clone(servers)
}

// remove withdraws a container's names.
func (d *dnsServers) remove(containerID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for networkID := range d.joined[containerID] {
		d.leaveLocked(containerID, networkID)
	}
	delete(d.joined, containerID)
	delete(d.upstreams, containerID)
}

// removeEndpoint withdraws a container's names on one network.
func (d *dnsServers) removeEndpoint(containerID, networkID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leaveLocked(containerID, networkID)
	delete(d.joined[containerID], networkID)
}

func (d *dnsServers) leaveLocked(containerID, networkID string) {
	tbl := d.names[networkID]
	for n, owners := range tbl {
		delete(owners, containerID)
		if len(owners) == 0 {
			delete(tbl, n)
		}
	}
	for a, c := range d.owners[networkID] {
		if c == containerID {
			delete(d.owners[networkID], a)
		}
	}
}

// lookup answers name for a query from address from to the server of
// networkID: the names of every network the asking container is on, or
// of that network alone when the asker is unknown; and, for a name none
// has, the asker's --dns servers (nil: the host's).
func (d *dnsServers) lookup(networkID string, from netip.Addr, name string) ([]netip.Addr, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nets := []string{networkID}
	c, known := d.owners[networkID][from]
	if known {
		for n := range d.joined[c] {
			if n != networkID {
				nets = append(nets, n)
			}
		}
	}
	var out []netip.Addr
	for _, n := range nets {
		for _, a := range d.names[n][name] {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	if len(out) > 0 || !known {
		return out, nil
	}
	return nil, slices.Clone(d.upstreams[c])
}

func (d *dnsServers) answer(networkID string, w dns.ResponseWriter, r *dns.Msg) {
	if len(r.Question) != 1 {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeFormatError)
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	addrs, upstreams := d.lookup(networkID, remoteAddr(w), name)
	if len(addrs) > 0 {
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionAvailable = true
		if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY {
			for _, a := range addrs {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 600},
					A:   net.IP(a.AsSlice()),
				})
			}
		}
		// Other types of a known name: an empty NOERROR answer, so
		// resolvers asking AAAA first fall back to A.
		_ = w.WriteMsg(m)
		return
	}
	_ = w.WriteMsg(d.forward(r, upstreams))
}

// remoteAddr is the IPv4 address a query came from.
func remoteAddr(w dns.ResponseWriter) netip.Addr {
	var ap netip.AddrPort
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		ap = a.AddrPort()
	case *net.TCPAddr:
		ap = a.AddrPort()
	}
	return ap.Addr().Unmap()
}

// forward asks servers, or the host's nameservers when there are none;
// SERVFAIL when none answers.
func (d *dnsServers) forward(r *dns.Msg, servers []string) *dns.Msg {
	if len(servers) == 0 {
		b, _ := os.ReadFile(d.resolvConf)
		servers = parseResolvConf(string(b)).Nameservers
	}
	c := &dns.Client{Timeout: 2 * time.Second}
	for _, ns := range servers {
		resp, _, err := c.Exchange(r, net.JoinHostPort(ns, d.port))
		if err == nil && resp != nil {
			return resp
		}
	}
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeServerFailure)
	return m
}
