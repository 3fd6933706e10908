package network

import (
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/miekg/dns"
)

// A name no container has is forwarded, as by dockerd's embedded DNS, to
// the asking container's --dns servers; a container without them, or an
// asker the server does not know, gets the host's.
func TestDNSForwardsToTheContainersServers(t *testing.T) {
	// The upstream answers on loopback, at a port of its own.
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(10, 9, 9, 9)})
		_ = w.WriteMsg(m)
	})}
	go func() { _ = upstream.ActivateAndServe() }()
	t.Cleanup(func() { _ = upstream.Shutdown() })
	_, port, _ := net.SplitHostPort(pc.LocalAddr().String())

	d := newDNSServers(&Manager{opts: Options{ResolvConf: filepath.Join(t.TempDir(), "none")}}, slog.New(slog.DiscardHandler))
	d.port = port
	withDNS, without := netip.MustParseAddr("10.50.0.2"), netip.MustParseAddr("10.50.0.3")
	d.add("c1", []endpointRecord{{NetworkID: "n", Addr: withDNS, DNSNames: []string{"one"}}})
	d.setUpstreams("c1", []string{"127.0.0.1"})
	d.add("c2", []endpointRecord{{NetworkID: "n", Addr: without, DNSNames: []string{"two"}}})
	d.setUpstreams("c2", nil)

	for _, tc := range []struct {
		name      string
		from      netip.Addr
		query     string
		addrs     []netip.Addr
		upstreams []string
	}{
		{"a container's name", withDNS, "two", []netip.Addr{without}, nil},
		{"another name, from a container with --dns", withDNS, "ext.test", nil, []string{"127.0.0.1"}},
		{"another name, from one without", without, "ext.test", nil, nil},
		{"an unknown asker", netip.MustParseAddr("10.50.0.9"), "ext.test", nil, nil},
	} {
		addrs, upstreams := d.lookup("n", tc.from, tc.query)
		if !slices.Equal(addrs, tc.addrs) || !slices.Equal(upstreams, tc.upstreams) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, addrs, upstreams, tc.addrs, tc.upstreams)
		}
	}

	q := new(dns.Msg)
	q.SetQuestion("ext.test.", dns.TypeA)
	_, upstreams := d.lookup("n", withDNS, "ext.test")
	if resp := d.forward(q, upstreams); len(resp.Answer) != 1 || resp.Answer[0].(*dns.A).A.String() != "10.9.9.9" {
		t.Errorf("forwarded to the container's server: %v", resp)
	}
	// The host's resolv.conf (here, none) has no nameserver to ask.
	if resp := d.forward(q, nil); resp.Rcode != dns.RcodeServerFailure {
		t.Errorf("forwarded without servers: rcode %d, want SERVFAIL", resp.Rcode)
	}
	d.remove("c1")
	if _, upstreams := d.lookup("n", withDNS, "ext.test"); upstreams != nil {
		t.Errorf("a removed container's servers are still asked: %v", upstreams)
	}
}
