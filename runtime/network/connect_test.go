package network

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/proto"
)

// A running container on the default bridge joins a user network and
// leaves the bridge: the TAPs, addresses, interface names, hosts lines,
// resolv.conf, default route and DNS follow, and survive a restart of the
// manager.
func TestConnectRunning(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	links := newFakeLinks()
	m := testManager(t, root, links)
	if err := m.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	a, err := m.Create(ctx, network.CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	bridge, _ := m.Configure("bridge", nil)
	if _, err := m.Attach(ctx, Request{ContainerID: ctrA, Name: "first", Hostname: "aaaaaaaaaaaa", Networks: bridge}); err != nil {
		t.Fatal(err)
	}
	onA, _ := m.Configure("a", nil)
	if _, err := m.Attach(ctx, Request{ContainerID: ctrB, Name: "second", Hostname: "bbbbbbbbbbbb", Networks: onA}); err != nil {
		t.Fatal(err)
	}

	plug, err := m.ConnectRunning(ctx, ctrA, "a", onA["a"])
	if err != nil {
		t.Fatal(err)
	}
	want := &Plug{
		Net: vmm.Net{Tap: "hkaaaaaaaaaaaa1", MAC: "02:42:0a:7c:00:03"},
		Change: proto.InterfaceChangeSpec{
			Interface:  proto.InterfaceSpec{MAC: "02:42:0a:7c:00:03", Name: "eth1", Address: "10.124.0.3/24"},
			HostsEntry: "10.124.0.3\taaaaaaaaaaaa",
			// The first user network brings the embedded DNS.
			ResolvConf: "nameserver 127.0.0.11\noptions ndots:0\n",
			DNSServer:  "10.124.0.1:53",
		},
	}
	if plug.Net != want.Net || plug.Change.Interface != want.Change.Interface || plug.Change.HostsEntry != want.Change.HostsEntry ||
		plug.Change.ResolvConf != want.Change.ResolvConf || plug.Change.DNSServer != want.Change.DNSServer || plug.Change.DefaultRoute != nil {
		t.Errorf("plug = %+v\nwant %+v", plug, want)
	}
	if br := links.links["hkaaaaaaaaaaaa1"]; br != "husk-"+a.ID[:10] {
		t.Errorf("new TAP on %q, want a's bridge", br)
	}
	_, eps := m.Settings(ctrA, bridge, nil)
	if got := eps["a"]; got == nil || got.IPAddress.String() != "10.124.0.3" || got.EndpointID == "" || got.MacAddress.String() != "02:42:0a:7c:00:03" {
		t.Errorf("inspect of a after connect: %+v", got)
	}
	// first now resolves second, on the network it joined, and second
	// resolves first there.
	if got, _ := m.dns.lookup(a.ID, netip.MustParseAddr("10.124.0.3"), "second"); len(got) != 1 || got[0].String() != "10.124.0.2" {
		t.Errorf("first resolves second to %v", got)
	}
	if got, _ := m.dns.lookup(a.ID, netip.MustParseAddr("10.124.0.2"), "first"); len(got) != 1 || got[0].String() != "10.124.0.3" {
		t.Errorf("second resolves first to %v", got)
	}
	_, err = m.ConnectRunning(ctx, ctrA, "a", onA["a"])
	if !errdefs.IsPermissionDenied(err) || err.Error() != "endpoint with name first already exists in network a" {
		t.Errorf("second connect: %v", err)
	}

	// Leaving the bridge, which carried the default route, moves it to a.
	un, err := m.Unplugging(ctrA, "bridge")
	if err != nil {
		t.Fatal(err)
	}
	wantUn := Unplug{MAC: "02:42:7f:4d:00:02", Change: proto.InterfaceChangeSpec{
		Interface:    proto.InterfaceSpec{MAC: "02:42:7f:4d:00:02", Name: "eth0"},
		HostsEntry:   "127.77.0.2\taaaaaaaaaaaa",
		DefaultRoute: &proto.DefaultRoute{Interface: "eth1", Gateway: "10.124.0.1"},
	}}
	if un.MAC != wantUn.MAC || un.Change.Interface != wantUn.Change.Interface || un.Change.HostsEntry != wantUn.Change.HostsEntry ||
		un.Change.DefaultRoute == nil || *un.Change.DefaultRoute != *wantUn.Change.DefaultRoute || un.Change.ResolvConf != "" {
		t.Errorf("unplug = %+v\nwant %+v", un, wantUn)
	}
	if err := m.DisconnectRunning(ctx, ctrA, "bridge"); err != nil {
		t.Fatal(err)
	}
	if _, ok := links.links["hkaaaaaaaaaaaa0"]; ok {
		t.Error("the bridge TAP is left after disconnect")
	}
	if _, err := m.Unplugging(ctrA, "bridge"); !errdefs.IsNotFound(err) {
		t.Errorf("unplugging a network the container left: %v, want not found", err)
	}

	// A new manager on the same records: the container is on a alone,
	// with the default route, and its next interface is eth2.
	m2 := testManager(t, root, links)
	if err := m2.Start(ctx, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	rec := m2.sandboxes[ctrA].rec
	if len(rec.Endpoints) != 1 || rec.Endpoints[0].Network != "a" || !rec.Endpoints[0].Gateway || rec.NextIface != 2 {
		t.Errorf("record after disconnect: %+v", rec)
	}
	if att, err := m2.Attach(ctx, Request{ContainerID: ctrC, Name: "third", Networks: bridge}); err != nil || att.Nets[0].MAC != "02:42:7f:4d:00:02" {
		t.Errorf("the address first left is not free again: %+v %v", att, err)
	}
	plug, err = m2.ConnectRunning(ctx, ctrA, "bridge", bridge["bridge"])
	if err != nil {
		t.Fatal(err)
	}
	if plug.Change.Interface.Name != "eth2" || plug.Net.Tap != "hkaaaaaaaaaaaa0" || plug.Change.ResolvConf != "" {
		t.Errorf("reconnect: %+v, want eth2 on the freed TAP name and the resolver kept", plug)
	}

	// Leaving the network whose gateway is the container's DNS server
	// rewrites resolv.conf with the host's resolvers.
	un, err = m2.Unplugging(ctrA, "a")
	if err != nil {
		t.Fatal(err)
	}
	if un.Change.ResolvConf != "nameserver 10.255.255.53\n" || un.Change.DefaultRoute == nil || un.Change.DefaultRoute.Interface != "eth2" {
		t.Errorf("unplug of a: %+v", un.Change)
	}
}

// A TAP that cannot be made leaves no address taken and the record as it
// was.
func TestConnectRunningRollsBack(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	links := newFakeLinks()
	m := testManager(t, root, links)
	if err := m.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	a, err := m.Create(ctx, network.CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	bridge, _ := m.Configure("bridge", nil)
	if _, err := m.Attach(ctx, Request{ContainerID: ctrA, Name: "first", Networks: bridge}); err != nil {
		t.Fatal(err)
	}
	delete(links.links, "husk-"+a.ID[:10])
	onA, _ := m.Configure("a", nil)
	if _, err := m.ConnectRunning(ctx, ctrA, "a", onA["a"]); err == nil {
		t.Fatal("connect without a bridge succeeded")
	}
	if n := m.nets[a.ID].pool.inUse(); n != 0 {
		t.Errorf("%d addresses of a taken after a failed connect", n)
	}
	var rec sandboxRecord
	if err := readJSON(m.sandboxPath(ctrA), &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Endpoints) != 1 || rec.DNSServer.IsValid() {
		t.Errorf("record after a failed connect: %+v", rec)
	}
	if got := links.names(); !slices.Equal(got, []string{"hkaaaaaaaaaaaa0", "husk0"}) || strings.Contains(strings.Join(got, " "), "hkaaaaaaaaaaaa1") {
		t.Errorf("links after a failed connect: %v", got)
	}
	if _, err := m.ConnectRunning(ctx, ctrB, "a", onA["a"]); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("connect of a container that is not attached: %v", err)
	}
}

const ctrC = "cccccccccccc0000000000000000000000000000000000000000000000000000"
