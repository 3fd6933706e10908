package network

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
)

// fakeLinks keeps interfaces in a map.
type fakeLinks struct {
	mu    sync.Mutex
	links map[string]string // name → bridge it is enslaved to ("" for a bridge)
}

func newFakeLinks() *fakeLinks { return &fakeLinks{links: map[string]string{}} }

func (f *fakeLinks) ensureBridge(name string, gw netip.Prefix, _ int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links[name] = ""
	return nil
}

func (f *fakeLinks) deleteLink(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.links, name)
	return nil
}

func (f *fakeLinks) addTap(name, bridge string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.links[bridge]; !ok {
		return fmt.Errorf("no bridge %s", bridge)
	}
	f.links[name] = bridge
	return nil
}

func (f *fakeLinks) list(prefix string) (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for n, br := range f.links {
		if strings.HasPrefix(n, prefix) {
			out[n] = br == ""
		}
	}
	return out, nil
}

func (f *fakeLinks) hasUplink() (bool, error) { return false, nil }
func (f *fakeLinks) enableForwarding() error  { return nil }

func (f *fakeLinks) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.links {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

type fakeFirewall struct{ applied, removed int }

func (f *fakeFirewall) apply([]fwNetwork, bool) error { f.applied++; return nil }
func (f *fakeFirewall) remove() error                 { f.removed++; return nil }

// The default bridge lives in 127.77/16 here, so the published-port proxy
// reaches a "container" listening on loopback.
func testManager(t *testing.T, root string, l *fakeLinks) *Manager {
	t.Helper()
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 10.255.255.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := newManager(Options{Root: root, BridgeIP: netip.MustParsePrefix("127.77.0.1/16"), ResolvConf: resolv, Logger: slog.New(slog.DiscardHandler)}, l, &fakeFirewall{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const ctrA = "aaaaaaaaaaaa0000000000000000000000000000000000000000000000000000"
const ctrB = "bbbbbbbbbbbb0000000000000000000000000000000000000000000000000000"

func TestAttachDetachAndRestart(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	links := newFakeLinks()
	links.links["hkdeadbeef00010"] = "husk0" // a TAP a crashed daemon left
	m := testManager(t, root, links)
	if err := m.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if got := links.names(); len(got) != 1 || got[0] != "husk0" {
		t.Fatalf("links after Start = %v, want only husk0", got)
	}
	nets, err := m.Configure("bridge", nil)
	if err != nil {
		t.Fatal(err)
	}
	attA, err := m.Attach(ctx, Request{ContainerID: ctrA, Name: "a", Hostname: "aaaaaaaaaaaa", Networks: nets})
	if err != nil {
		t.Fatal(err)
	}
	if len(attA.Nets) != 1 || attA.Nets[0].Tap != "hkaaaaaaaaaaaa0" || attA.Nets[0].MAC != "02:42:7f:4d:00:02" {
		t.Errorf("nets = %+v, want tap hkaaaaaaaaaaaa0 with MAC 02:42:7f:4d:00:02", attA.Nets)
	}
	ifc := attA.Guest.Interfaces[0]
	if ifc.Address != "127.77.0.2/16" || ifc.Gateway != "127.77.0.1" || ifc.Name != "eth0" {
		t.Errorf("guest interface = %+v", ifc)
	}
	if !strings.HasSuffix(attA.Hosts, "127.77.0.2\taaaaaaaaaaaa\n") {
		t.Errorf("hosts = %q, want the container's own line last", attA.Hosts)
	}
	if attA.ResolvConf != "nameserver 10.255.255.53\n" {
		t.Errorf("resolv.conf = %q", attA.ResolvConf)
	}
	attB, err := m.Attach(ctx, Request{ContainerID: ctrB, Name: "b", Networks: nets})
	if err != nil {
		t.Fatal(err)
	}
	if attB.Guest.Interfaces[0].Address != "127.77.0.3/16" {
		t.Errorf("second container got %s, want 127.77.0.3/16", attB.Guest.Interfaces[0].Address)
	}

	// A daemon crash: a new manager on the same root, with A still
	// running and B gone. A keeps its address; B's is free and its TAP
	// goes.
	m2 := testManager(t, root, links)
	if err := m2.Start(ctx, func(id string) bool { return id == ctrA }); err != nil {
		t.Fatal(err)
	}
	if got := links.names(); strings.Join(got, " ") != "hkaaaaaaaaaaaa0 husk0" {
		t.Errorf("links after restart = %v, want A's TAP and the bridge", got)
	}
	_, eps := m2.Settings(ctrA, nets, nil)
	if got := eps["bridge"].IPAddress.String(); got != "127.77.0.2" {
		t.Errorf("A's address after restart = %s", got)
	}
	attC, err := m2.Attach(ctx, Request{ContainerID: ctrB, Name: "b", Networks: nets})
	if err != nil {
		t.Fatal(err)
	}
	if got := attC.Guest.Interfaces[0].Address; got != "127.77.0.3/16" {
		t.Errorf("address after B's release = %s, want 127.77.0.3/16 (lowest free)", got)
	}
	for _, id := range []string{ctrA, ctrB} {
		if err := m2.Detach(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got := links.names(); strings.Join(got, " ") != "husk0" {
		t.Errorf("links after detach = %v", got)
	}
	if err := m2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := links.names(); len(got) != 0 {
		t.Errorf("links after Close = %v, want none", got)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "containers")); len(entries) != 0 {
		t.Errorf("records left after detach: %d", len(entries))
	}
}

func TestConfigure(t *testing.T) {
	m := testManager(t, t.TempDir(), newFakeLinks())
	ctx := context.Background()
	if err := m.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, network.CreateRequest{Name: "user", IPAM: &network.IPAM{Config: []network.IPAMConfig{{Subnet: netip.MustParsePrefix("10.150.0.0/24")}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, network.CreateRequest{Name: "auto"}); err != nil {
		t.Fatal(err)
	}
	withIP := func(ip string, aliases ...string) *network.EndpointSettings {
		return &network.EndpointSettings{Aliases: aliases, IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: netip.MustParseAddr(ip)}}
	}
	tests := []struct {
		mode    string
		eps     map[string]*network.EndpointSettings
		wantErr func(error) bool
		msg     string
	}{
		{mode: "host", wantErr: errdefs.IsInvalidArgument, msg: "husk does not support --network host"},
		{mode: "container:x", wantErr: errdefs.IsInvalidArgument, msg: "husk does not support --network container"},
		{mode: "nope", wantErr: errdefs.IsNotFound, msg: "network nope not found"},
		// dockerd's validateEndpointSettings, as create words it.
		{mode: "bridge", eps: map[string]*network.EndpointSettings{"bridge": {Aliases: []string{"x"}}}, wantErr: errdefs.IsInvalidArgument,
			msg: "invalid config for network bridge: invalid endpoint settings:\nnetwork-scoped alias is supported only for containers in user defined networks"},
		{mode: "bridge", eps: map[string]*network.EndpointSettings{"bridge": withIP("10.123.0.9", "x")}, wantErr: errdefs.IsInvalidArgument,
			msg: "invalid config for network bridge: invalid endpoint settings:\n* user specified IP address is supported on user defined networks only\n* network-scoped alias is supported only for containers in user defined networks"},
		{mode: "user", eps: map[string]*network.EndpointSettings{"user": withIP("10.151.0.9")}, wantErr: errdefs.IsInvalidArgument,
			msg: "invalid config for network user: invalid endpoint settings:\nno configured subnet or ip-range contain the IP address 10.151.0.9"},
		{mode: "user", eps: map[string]*network.EndpointSettings{"user": withIP("0.0.0.0")}, wantErr: errdefs.IsInvalidArgument,
			msg: "invalid config for network user: invalid endpoint settings:\n* invalid IPv4 address: 0.0.0.0\n* no configured subnet or ip-range contain the IP address 0.0.0.0"},
		{mode: "auto", eps: map[string]*network.EndpointSettings{"auto": withIP("10.124.0.9")}, wantErr: errdefs.IsInvalidArgument,
			msg: "invalid config for network auto: invalid endpoint settings:\nuser specified IP address is supported only when connecting to networks with user configured subnets"},
		{mode: "user", eps: map[string]*network.EndpointSettings{"user": withIP("10.150.0.9", "x")}},
		{mode: "none"},
		{mode: "bridge"},
	}
	for _, tt := range tests {
		got, err := m.Configure(tt.mode, tt.eps)
		if tt.wantErr == nil {
			if err != nil || got[tt.mode] == nil {
				t.Errorf("Configure(%s) = %v, %v", tt.mode, got, err)
			}
			continue
		}
		if !tt.wantErr(err) || !strings.HasPrefix(err.Error(), tt.msg) {
			t.Errorf("Configure(%s) error = %v, want %q", tt.mode, err, tt.msg)
		}
	}
}

// startedWithBackend starts a manager and, as the container at the
// bridge's first address, a TCP server that runs serve on each
// connection; it returns the server's port.
func startedWithBackend(t *testing.T, links *fakeLinks, serve func(net.Conn)) (*Manager, network.Port) {
	t.Helper()
	m := testManager(t, t.TempDir(), links)
	if err := m.Start(context.Background(), func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	backend, err := net.Listen("tcp4", "127.77.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.77.0.2: %v", err)
	}
	t.Cleanup(func() { backend.Close() })
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return m, network.MustParsePort(fmt.Sprintf("%d/tcp", backend.Addr().(*net.TCPAddr).Port))
}

func TestPublishedPortForwardsAndCloses(t *testing.T) {
	ctx := context.Background()
	links := newFakeLinks()
	// The "container" echoes a line back.
	m, port := startedWithBackend(t, links, func(c net.Conn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = io.WriteString(c, "echo "+line)
	})
	nets, _ := m.Configure("bridge", nil)
	req := Request{ContainerID: ctrA, Name: "web", Networks: nets,
		PortBindings: network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1")}}}}
	if _, err := m.Attach(ctx, req); err != nil {
		t.Fatal(err)
	}
	ports, _ := m.Settings(ctrA, nets, nil)
	bound := ports[port]
	if len(bound) != 1 || bound[0].HostIP.String() != "127.0.0.1" || bound[0].HostPort == "0" {
		t.Fatalf("published = %+v, want one random port on 127.0.0.1", bound)
	}
	addr := net.JoinHostPort("127.0.0.1", bound[0].HostPort)
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "hi\n")
	reply, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if reply != "echo hi\n" {
		t.Errorf("reply through the published port = %q, %v", reply, err)
	}

	// The same host port for another container: dockerd's words.
	req2 := Request{ContainerID: ctrB, Name: "web2", Networks: nets,
		PortBindings: network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: bound[0].HostPort}}}}
	_, err = m.Attach(ctx, req2)
	if err == nil || !strings.Contains(err.Error(), "Bind for 127.0.0.1:"+bound[0].HostPort+" failed: port is already allocated") {
		t.Errorf("second bind error = %v", err)
	}
	if got := links.names(); strings.Join(got, " ") != "hkaaaaaaaaaaaa0 husk0" {
		t.Errorf("a failed attach left %v", got)
	}

	if err := m.Detach(ctx, ctrA); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp4", addr); err == nil {
		c.Close()
		t.Errorf("published port still accepts after detach")
	}
}

// TestPublishedPortDualStack: a port published with no host address is
// bound on 0.0.0.0 and [::] at one port, as dockerd binds it; both
// forward, inspect shows IPv4 first, and detach closes both.
func TestPublishedPortDualStack(t *testing.T) {
	if l, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		l.Close()
	}
	ctx := context.Background()
	m, port := startedWithBackend(t, newFakeLinks(), func(c net.Conn) { _, _ = io.WriteString(c, "hello\n") })
	nets, _ := m.Configure("bridge", nil)
	if _, err := m.Attach(ctx, Request{ContainerID: ctrA, Name: "web", Networks: nets, PortBindings: network.PortMap{port: nil}}); err != nil {
		t.Fatal(err)
	}
	ports, _ := m.Settings(ctrA, nets, nil)
	bound := ports[port]
	if len(bound) != 2 || bound[0].HostIP.String() != "0.0.0.0" || bound[1].HostIP.String() != "::" || bound[0].HostPort != bound[1].HostPort {
		t.Fatalf("published = %+v, want 0.0.0.0 and :: at one port", bound)
	}
	for _, host := range []string{"127.0.0.1", "::1"} {
		addr := net.JoinHostPort(host, bound[0].HostPort)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Errorf("dial %s: %v", addr, err)
			continue
		}
		reply, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if reply != "hello\n" {
			t.Errorf("reply through %s = %q, %v", addr, reply, err)
		}
	}
	if err := m.Detach(ctx, ctrA); err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "::1"} {
		if c, err := net.Dial("tcp", net.JoinHostPort(host, bound[0].HostPort)); err == nil {
			c.Close()
			t.Errorf("%s still accepts after detach", host)
		}
	}
}
