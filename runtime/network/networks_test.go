package network

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/network"
)

func TestUserNetworks(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	links := newFakeLinks()
	m := testManager(t, root, links)
	if err := m.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	a, err := m.Create(ctx, network.CreateRequest{Name: "a", Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, network.CreateRequest{Name: "b", Internal: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, network.CreateRequest{Name: "a"}); !errdefs.IsConflict(err) || err.Error() != "network with name a already exists" {
		t.Errorf("duplicate create: %v", err)
	}
	sub := netip.MustParsePrefix("10.124.0.128/25")
	if _, err := m.Create(ctx, network.CreateRequest{Name: "c", IPAM: &network.IPAM{Config: []network.IPAMConfig{{Subnet: sub}}}}); err == nil {
		t.Error("an overlapping subnet was accepted")
	}
	ia, _ := m.Inspect(ctx, "a")
	ib, _ := m.Inspect(ctx, b.ID[:6])
	if got := ia.IPAM.Config[0]; got.Subnet.String() != "10.124.0.0/24" || got.Gateway.String() != "10.124.0.1" {
		t.Errorf("a's IPAM = %+v", got)
	}
	if got := ib.IPAM.Config[0].Subnet.String(); got != "10.124.1.0/24" || !ib.Internal {
		t.Errorf("b: subnet %s internal %v", got, ib.Internal)
	}
	want := []string{"husk-" + a.ID[:10], "husk-" + b.ID[:10], "husk0"}
	sort.Strings(want)
	if bridges := links.names(); strings.Join(bridges, " ") != strings.Join(want, " ") {
		t.Errorf("bridges = %v, want %v", bridges, want)
	}

	nets, err := m.Configure("a", map[string]*network.EndpointSettings{"a": {Aliases: []string{"web"}}})
	if err != nil {
		t.Fatal(err)
	}
	att, err := m.Attach(ctx, Request{ContainerID: ctrA, Name: "srv", Hostname: "aaaaaaaaaaaa", Networks: nets})
	if err != nil {
		t.Fatal(err)
	}
	if att.ResolvConf != "nameserver 127.0.0.11\noptions ndots:0\n" || att.DNSServer != "10.124.0.1:53" {
		t.Errorf("resolv.conf on a user network = %q, DNS server %q", att.ResolvConf, att.DNSServer)
	}
	for _, name := range []string{"srv", "web", "aaaaaaaaaaaa"} {
		if got, _ := m.dns.lookup(a.ID, netip.Addr{}, name); len(got) != 1 || got[0].String() != "10.124.0.2" {
			t.Errorf("DNS %s on a = %v", name, got)
		}
		if got, _ := m.dns.lookup(b.ID, netip.Addr{}, name); len(got) != 0 {
			t.Errorf("DNS %s leaks onto b: %v", name, got)
		}
	}
	if err := m.Remove(ctx, "a"); !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), "has active endpoints") {
		t.Errorf("remove in use: %v", err)
	}
	if err := m.Remove(ctx, "bridge"); err == nil || err.Error() != "bridge is a pre-defined network and cannot be removed" {
		t.Errorf("remove bridge: %v", err)
	}
	list, _ := m.List(ctx, map[string][]string{"label": {"k=v"}})
	if len(list) != 1 || list[0].Name != "a" {
		t.Errorf("list label=k=v: %+v", list)
	}
	// b was created just now: an until an hour back keeps it, as
	// dockerd's does; a bad until is refused in its words.
	if pruned, err := m.Prune(ctx, map[string][]string{"until": {"1h"}}); err != nil || len(pruned) != 0 {
		t.Errorf("prune until=1h = %v, %v; want nothing, b is newer", pruned, err)
	}
	if _, err := m.Prune(ctx, map[string][]string{"until": {"soon"}}); !errdefs.IsInvalidArgument(err) || err.Error() != `failed to parse value as time or duration: "soon"` {
		t.Errorf("prune until=soon: %v", err)
	}
	pruned, err := m.Prune(ctx, nil)
	if err != nil || strings.Join(pruned, ",") != "b" {
		t.Errorf("prune = %v, %v; want only b (a is in use)", pruned, err)
	}
	if err := m.Detach(ctx, ctrA); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.dns.lookup(a.ID, netip.Addr{}, "srv"); len(got) != 0 {
		t.Errorf("DNS after detach: %v", got)
	}
	if err := m.Remove(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	// A restart sees only the predefined networks.
	m2 := testManager(t, root, links)
	list, _ = m2.List(ctx, nil)
	if len(list) != 2 || list[0].Name != "bridge" || list[1].Name != "none" {
		t.Errorf("networks after restart = %+v", list)
	}
	if err := m2.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if got := links.names(); strings.Join(got, " ") != "husk0" {
		t.Errorf("links after removing every network = %v", got)
	}
}

// TestCreateRefusesOtherDrivers: dockerd's own drivers other than bridge
// are refused, in dockerd's words off a swarm where it has them (overlay,
// a second host or null network, a swarm scope), as husk's VMs cannot use
// the others; any other name is a plugin dockerd does not find.
func TestCreateRefusesOtherDrivers(t *testing.T) {
	m := &Manager{}
	for _, tc := range []struct {
		driver  string
		is      func(error) bool
		wantErr string
	}{
		{"macvlan", errdefs.IsInvalidArgument, `husk supports only the bridge network driver, not "macvlan"`},
		{"overlay", errdefs.IsPermissionDenied, `This node is not a swarm manager. Use "docker swarm init" or "docker swarm join" to connect this node to swarm and try again.`},
		{"host", errdefs.IsPermissionDenied, `only one instance of "host" network is allowed`},
		{"null", errdefs.IsPermissionDenied, `only one instance of "null" network is allowed`},
		{"nosuch", errdefs.IsNotFound, `plugin "nosuch" not found`},
	} {
		_, err := m.Create(context.Background(), network.CreateRequest{Name: "n", Driver: tc.driver})
		if !tc.is(err) || err.Error() != tc.wantErr {
			t.Errorf("driver %s: %v, want %q", tc.driver, err, tc.wantErr)
		}
	}
	// dockerd's predefined names are refused first, existing or not.
	for _, name := range []string{"bridge", "host", "none", "default"} {
		_, err := m.Create(context.Background(), network.CreateRequest{Name: name, Driver: "macvlan"})
		if want := "operation is not permitted on predefined " + name + " network"; !errdefs.IsPermissionDenied(err) || err.Error() != want {
			t.Errorf("network %s: %v, want %q", name, err, want)
		}
	}
	_, err := m.Create(context.Background(), network.CreateRequest{Name: "n", Scope: "swarm"})
	if want := "cannot create a swarm scoped network when swarm is not active"; !errdefs.IsPermissionDenied(err) || err.Error() != want {
		t.Errorf("swarm scope: %v, want %q", err, want)
	}
}

// TestCreateIPRange: --ip-range is kept, shown by inspect, survives a
// restart, and is where a container's address comes from; a range the
// subnet does not hold is refused in dockerd's words.
func TestCreateIPRange(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	m := testManager(t, root, newFakeLinks())
	if err := m.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	cfg := func(subnet, ipRange string) *network.IPAM {
		c := network.IPAMConfig{IPRange: netip.MustParsePrefix(ipRange)}
		if subnet != "" {
			c.Subnet = netip.MustParsePrefix(subnet)
		}
		return &network.IPAM{Config: []network.IPAMConfig{c}}
	}
	for _, tc := range []struct{ subnet, ipRange, want string }{
		{"10.130.0.0/24", "10.131.0.0/25", "invalid network config:\ninvalid ip-range 10.131.0.0/25: parent subnet 10.130.0.0/24 doesn't contain ip-range"},
		{"10.130.0.0/24", "10.130.0.0/23", "invalid network config:\ninvalid ip-range 10.130.0.0/23: CIDR block is bigger than its parent subnet 10.130.0.0/24"},
		{"", "10.130.0.0/25", "invalid network config:\ninvalid subnet : invalid CIDR block notation"},
	} {
		if _, err := m.Create(ctx, network.CreateRequest{Name: "bad", IPAM: cfg(tc.subnet, tc.ipRange)}); !errdefs.IsInvalidArgument(err) || err.Error() != tc.want {
			t.Errorf("subnet %q range %s: %v, want %q", tc.subnet, tc.ipRange, err, tc.want)
		}
	}
	if _, err := m.Create(ctx, network.CreateRequest{Name: "r", IPAM: cfg("10.130.0.0/24", "10.130.0.200/29")}); err != nil {
		t.Fatal(err)
	}
	m2 := testManager(t, root, newFakeLinks())
	if err := m2.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	nw, err := m2.Inspect(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	// A gateway husk chose for the user's subnet is left out, as dockerd
	// shows the subnet as configured.
	if got := nw.IPAM.Config[0]; got.Subnet.String() != "10.130.0.0/24" || got.IPRange.String() != "10.130.0.200/29" || got.Gateway.IsValid() {
		t.Errorf("IPAM after a restart = %+v, want the subnet and the range, no gateway", got)
	}
	// libnetwork gives the gateway the range's first address, and then
	// containers the next; with a gateway of the user's, the range's
	// first goes to a container.
	gw := network.IPAMConfig{Subnet: netip.MustParsePrefix("10.132.0.0/24"), IPRange: netip.MustParsePrefix("10.132.0.100/30"), Gateway: netip.MustParseAddr("10.132.0.1")}
	if _, err := m2.Create(ctx, network.CreateRequest{Name: "g", IPAM: &network.IPAM{Config: []network.IPAMConfig{gw}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ net, id, addr, gateway string }{
		{"r", ctrA, "10.130.0.201/24", "10.130.0.200"},
		{"g", ctrB, "10.132.0.100/24", "10.132.0.1"},
	} {
		nets, err := m2.Configure(tc.net, nil)
		if err != nil {
			t.Fatal(err)
		}
		att, err := m2.Attach(ctx, Request{ContainerID: tc.id, Name: "c" + tc.net, Networks: nets})
		if err != nil {
			t.Fatal(err)
		}
		if got := att.Guest.Interfaces[0]; got.Address != tc.addr || got.Gateway != tc.gateway {
			t.Errorf("on %s: address %s via %s, want %s via %s", tc.net, got.Address, got.Gateway, tc.addr, tc.gateway)
		}
	}
}

// TestCreateAuxAddresses: --aux-address is kept and shown, and no
// container gets one of them, also after a restart; one outside the
// subnet is refused as dockerd refuses it.
func TestCreateAuxAddresses(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	m := testManager(t, root, newFakeLinks())
	if err := m.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	ipam := func(aux map[string]netip.Addr) *network.IPAM {
		return &network.IPAM{Config: []network.IPAMConfig{{Subnet: netip.MustParsePrefix("10.140.0.0/24"), AuxAddress: aux}}}
	}
	out := map[string]netip.Addr{"a": netip.MustParseAddr("10.141.0.5")}
	if _, err := m.Create(ctx, network.CreateRequest{Name: "bad", IPAM: ipam(out)}); !errdefs.IsInvalidArgument(err) ||
		err.Error() != "invalid network config:\ninvalid auxiliary address a: parent subnet 10.140.0.0/24 doesn't contain this address" {
		t.Errorf("an aux address outside the subnet: %v", err)
	}
	aux := map[string]netip.Addr{"router": netip.MustParseAddr("10.140.0.2"), "dns": netip.MustParseAddr("10.140.0.4")}
	if _, err := m.Create(ctx, network.CreateRequest{Name: "x", IPAM: ipam(aux)}); err != nil {
		t.Fatal(err)
	}
	m2 := testManager(t, root, newFakeLinks())
	if err := m2.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	nw, err := m2.Inspect(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if got := nw.IPAM.Config[0].AuxAddress; len(got) != 2 || got["router"] != aux["router"] || got["dns"] != aux["dns"] {
		t.Errorf("aux addresses after a restart = %v, want %v", got, aux)
	}
	var addrs []string
	for i, id := range []string{ctrA, ctrB} {
		nets, err := m2.Configure("x", nil)
		if err != nil {
			t.Fatal(err)
		}
		att, err := m2.Attach(ctx, Request{ContainerID: id, Name: fmt.Sprint("c", i), Networks: nets})
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, att.Guest.Interfaces[0].Address)
	}
	if want := "10.140.0.3/24 10.140.0.5/24"; strings.Join(addrs, " ") != want {
		t.Errorf("containers got %v, want %s (around the aux addresses)", addrs, want)
	}
}

// recordedEvents keeps what was published, as "type action id attrs".
type recordedEvents []string

func (r *recordedEvents) Publish(typ events.Type, action events.Action, id string, attrs map[string]string) {
	*r = append(*r, fmt.Sprintf("%s %s %s %v", typ, action, id, attrs))
}

// TestNetworkEvents: create, remove and prune are reported as dockerd
// reports them: the network's ID, name and driver; a prune once more.
func TestNetworkEvents(t *testing.T) {
	ctx := context.Background()
	m := testManager(t, t.TempDir(), newFakeLinks())
	var got recordedEvents
	m.opts.Events = &got
	if err := m.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	a, err := m.Create(ctx, network.CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, network.CreateRequest{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Prune(ctx, nil); err != nil {
		t.Fatal(err)
	}
	want := recordedEvents{
		"network create " + a.ID + " map[name:a type:bridge]",
		"network destroy " + a.ID + " map[name:a type:bridge]",
		"network create " + b.ID + " map[name:b type:bridge]",
		"network destroy " + b.ID + " map[name:b type:bridge]",
		"network prune  map[reclaimed:0]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestListFilters: names and IDs match as dockerd matches them (the value,
// or a regular expression found in them), and the dangling and type
// filters' values it refuses are refused in its words.
func TestListFilters(t *testing.T) {
	ctx := context.Background()
	m := testManager(t, t.TempDir(), newFakeLinks())
	if err := m.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	one, err := m.Create(ctx, network.CreateRequest{Name: "zz-one"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, network.CreateRequest{Name: "zz-two"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		filters map[string][]string
		want    string // names, or the error
	}{
		{map[string][]string{"name": {"^zz"}}, "zz-one zz-two"},
		{map[string][]string{"name": {"-one$"}}, "zz-one"},
		{map[string][]string{"name": {"zz-one"}}, "zz-one"},
		{map[string][]string{"name": {"^bridge$", "^none$"}}, "bridge none"},
		{map[string][]string{"name": {"["}}, ""},
		{map[string][]string{"id": {one.ID[5:15]}}, "zz-one"},
		{map[string][]string{"id": {"^" + one.ID[:4]}}, "zz-one"},
		{map[string][]string{"type": {"custom"}, "dangling": {"1"}}, "zz-one zz-two"},
		{map[string][]string{"type": {"builtin"}, "dangling": {"false"}}, "bridge none"},
		{map[string][]string{"dangling": {"maybe"}}, `error: invalid value for filter 'dangling', must be "true" (or "1"), or "false" (or "0")`},
		{map[string][]string{"dangling": {"true", "false"}}, `error: got more than one value for filter key "dangling"`},
		{map[string][]string{"type": {"bogus"}}, "error: invalid filter: 'type'='bogus'"},
	} {
		list, err := m.List(ctx, tc.filters)
		var got []string
		for _, n := range list {
			got = append(got, n.Name)
		}
		gotStr := strings.Join(got, " ")
		if err != nil {
			gotStr = "error: " + err.Error()
		}
		if gotStr != tc.want {
			t.Errorf("list %v = %q, want %q", tc.filters, gotStr, tc.want)
		}
	}
}
