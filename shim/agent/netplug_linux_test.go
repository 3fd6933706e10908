package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

type fakeInterfaces struct {
	mu      sync.Mutex
	added   []proto.InterfaceSpec
	removed []proto.InterfaceSpec
	route   *proto.DefaultRoute
	fail    error
}

func (f *fakeInterfaces) Add(_ context.Context, ifc proto.InterfaceSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.added = append(f.added, ifc)
	return nil
}

func (f *fakeInterfaces) Remove(_ context.Context, ifc proto.InterfaceSpec, route *proto.DefaultRoute) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, ifc)
	f.route = route
	return nil
}

func netplugClient(t *testing.T, ifs agent.Interfaces, stateDir string) *host.Client {
	t.Helper()
	opts := agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(t.TempDir()), StateDir: stateDir}
	if ifs != nil {
		opts.Interfaces = ifs
	}
	return serveAgent(t, opts)
}

// A connect adds the interface and the container's hosts line for its
// new address; a disconnect removes the lines naming the container, as
// dockerd 20.10 does, and moves the default route when asked. The etc
// files change in place, under the container's bind mounts.
func TestInterfaceChanges(t *testing.T) {
	f := &fakeInterfaces{}
	state := t.TempDir()
	c := netplugClient(t, f, state)
	const base = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "abc", Hosts: base + "10.124.0.2\tabc\n", ResolvConf: "nameserver 10.123.0.1\n"}); err != nil {
		t.Fatal(err)
	}
	hosts := filepath.Join(state, "etc", "hosts")
	before, err := os.Stat(hosts)
	if err != nil {
		t.Fatal(err)
	}
	ifc := proto.InterfaceSpec{MAC: "02:42:0a:7c:01:03", Name: "eth1", Address: "10.124.1.3/24"}
	err = c.AddInterface(ctx(t), proto.InterfaceChangeSpec{Interface: ifc, HostsEntry: "10.124.1.3\tabc", ResolvConf: "nameserver 10.124.1.1\noptions ndots:0\n"})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.added) != 1 || f.added[0] != ifc {
		t.Errorf("interfaces added: %+v, want %+v", f.added, ifc)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(state, "etc", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got, want := read("hosts"), base+"10.124.0.2\tabc\n10.124.1.3\tabc\n"; got != want {
		t.Errorf("hosts after connect %q, want %q", got, want)
	}
	if got := read("resolv.conf"); got != "nameserver 10.124.1.1\noptions ndots:0\n" {
		t.Errorf("resolv.conf after connect %q", got)
	}

	route := &proto.DefaultRoute{Interface: "eth1", Gateway: "10.124.1.1"}
	err = c.RemoveInterface(ctx(t), proto.InterfaceChangeSpec{Interface: proto.InterfaceSpec{MAC: "02:42:0a:7c:00:02", Name: "eth0"}, HostsEntry: "10.124.0.2\tabc", DefaultRoute: route})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.removed) != 1 || f.removed[0].MAC != "02:42:0a:7c:00:02" || f.route == nil || *f.route != *route {
		t.Errorf("removed %+v with route %+v", f.removed, f.route)
	}
	if got := read("hosts"); got != base {
		t.Errorf("hosts after disconnect %q, want %q", got, base)
	}
	after, err := os.Stat(hosts)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("/etc/hosts was replaced, not rewritten")
	}

	// A guest that cannot configure the device reports it, and the
	// hosts file is left alone.
	f.fail = errors.New("no network interface with MAC 02:42:0a:7c:01:04")
	err = c.AddInterface(ctx(t), proto.InterfaceChangeSpec{Interface: proto.InterfaceSpec{MAC: "02:42:0a:7c:01:04", Name: "eth2"}, HostsEntry: "10.124.1.4\tabc"})
	if err == nil {
		t.Fatal("AddInterface succeeded although the guest failed")
	}
	if got := read("hosts"); got != base {
		t.Errorf("hosts after a failed connect %q, want %q", got, base)
	}
}

func TestInterfaceChangesRefused(t *testing.T) {
	var ae *host.AgentError
	c := netplugClient(t, nil, t.TempDir())
	spec := proto.InterfaceChangeSpec{Interface: proto.InterfaceSpec{MAC: "02:42:0a:7c:01:03", Name: "eth1"}}
	if err := c.AddInterface(ctx(t), spec); !errors.As(err, &ae) || ae.Kind != proto.KindInvalid {
		t.Errorf("add interface without Interfaces: %v, want an invalid-request agent error", err)
	}
	c = netplugClient(t, &fakeInterfaces{}, t.TempDir())
	if err := c.AddInterface(ctx(t), spec); !errors.As(err, &ae) || ae.Kind != proto.KindInvalid {
		t.Errorf("add interface before setup: %v, want an invalid-request agent error", err)
	}
}
