//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/husk-vm/husk/shim/proto"
)

// Interfaces changes the guest's links for OpAddInterface and
// OpRemoveInterface.
type Interfaces interface {
	// Add configures the hot-plugged interface ifc, waiting until ctx
	// ends for the guest to probe it.
	Add(ctx context.Context, ifc proto.InterfaceSpec) error
	// Remove takes ifc's addresses away and brings it down; route, when
	// set, becomes the default route. An interface that is already gone
	// is not an error.
	Remove(ctx context.Context, ifc proto.InterfaceSpec, route *proto.DefaultRoute) error
}

// GuestInterfaces is the Interfaces of a real guest, over rtnetlink.
type GuestInterfaces struct{}

// Add implements Interfaces. The device shows up once the kernel's ACPI
// PCI hot-plug handler has probed it and virtio_net has bound it, which
// under TCG on a busy host can take seconds, so the wait is the host's to
// bound.
func (GuestInterfaces) Add(ctx context.Context, ifc proto.InterfaceSpec) error {
	l, err := findLink(ctx, ifc.MAC)
	if err != nil {
		return err
	}
	if l.Attrs().Name != ifc.Name {
		if other, err := netlink.LinkByName(ifc.Name); err == nil {
			return fmt.Errorf("name %s is taken by the interface with MAC %s", ifc.Name, other.Attrs().HardwareAddr)
		}
	}
	return ConfigureNetwork(ctx, &proto.NetworkSpec{Interfaces: []proto.InterfaceSpec{ifc}})
}

// Remove implements Interfaces.
func (GuestInterfaces) Remove(ctx context.Context, ifc proto.InterfaceSpec, route *proto.DefaultRoute) error {
	want, err := net.ParseMAC(ifc.MAC)
	if err != nil {
		return fmt.Errorf("interface MAC %q: %w", ifc.MAC, err)
	}
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, l := range links {
		if !strings.EqualFold(l.Attrs().HardwareAddr.String(), want.String()) {
			continue
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			return fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err)
		}
		for _, a := range addrs {
			if err := netlink.AddrDel(l, &a); err != nil {
				return fmt.Errorf("remove %s from %s: %w", a.IPNet, l.Attrs().Name, err)
			}
		}
		if err := netlink.LinkSetDown(l); err != nil {
			return fmt.Errorf("bring down %s: %w", l.Attrs().Name, err)
		}
	}
	if route == nil {
		return nil
	}
	l, err := netlink.LinkByName(route.Interface)
	if err != nil {
		return fmt.Errorf("default route: find %s: %w", route.Interface, err)
	}
	gw := net.ParseIP(route.Gateway)
	if gw == nil {
		return fmt.Errorf("default route: bad gateway %q", route.Gateway)
	}
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	return nil
}

// linkPoll is how often findLink looks for a device still being probed.
const linkPoll = 50 * time.Millisecond

// findLink waits until ctx ends for the interface with MAC mac.
func findLink(ctx context.Context, mac string) (netlink.Link, error) {
	want, err := net.ParseMAC(mac)
	if err != nil {
		return nil, fmt.Errorf("interface MAC %q: %w", mac, err)
	}
	for {
		links, err := netlink.LinkList()
		if err != nil {
			return nil, fmt.Errorf("list interfaces: %w", err)
		}
		for _, l := range links {
			if strings.EqualFold(l.Attrs().HardwareAddr.String(), want.String()) {
				return l, nil
			}
		}
		if err := sleepCtx(ctx, linkPoll); err != nil {
			return nil, errors.Join(fmt.Errorf("no network interface with MAC %s", mac), err)
		}
	}
}

// changeInterface serves OpAddInterface and OpRemoveInterface. The
// container's etc files change in place: it sees them through bind
// mounts of those very inodes.
func (a *Agent) changeInterface(ctx context.Context, op proto.Op, spec *proto.InterfaceChangeSpec) error {
	if spec == nil {
		return &agentError{proto.KindInvalid, string(op) + ": missing spec"}
	}
	ifs := a.opts.Interfaces
	if ifs == nil {
		return &agentError{proto.KindInvalid, string(op) + ": this agent does not manage the machine's interfaces"}
	}
	a.mu.Lock()
	etcDir := a.etcDir
	a.mu.Unlock()
	if etcDir == "" {
		return &agentError{proto.KindInvalid, string(op) + ": the container is not set up"}
	}
	a.mu.Lock()
	a.network = nil // re-addressed in full by the next refresh
	a.mu.Unlock()
	if op == proto.OpAddInterface {
		if err := ifs.Add(ctx, spec.Interface); err != nil {
			return fmt.Errorf("add interface %s: %w", spec.Interface.Name, err)
		}
	}
	a.mu.Lock()
	err := editEtc(etcDir, op, spec)
	a.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if spec.ResolvConf != "" {
		if err := a.redirectDNS(spec.DNSServer); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	if op == proto.OpRemoveInterface {
		if err := ifs.Remove(ctx, spec.Interface, spec.DefaultRoute); err != nil {
			return fmt.Errorf("remove interface %s: %w", spec.Interface.MAC, err)
		}
	}
	return nil
}

// editEtc applies a change's /etc/hosts entry and resolv.conf.
func editEtc(etcDir string, op proto.Op, spec *proto.InterfaceChangeSpec) error {
	if spec.ResolvConf != "" {
		if err := rewriteInPlace(filepath.Join(etcDir, "resolv.conf"), spec.ResolvConf); err != nil {
			return err
		}
	}
	entry := strings.TrimSpace(spec.HostsEntry)
	if entry == "" {
		return nil
	}
	path := filepath.Join(etcDir, "hosts")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return rewriteInPlace(path, hostsChanged(string(b), op, entry))
}

// hostsChanged is hosts with entry added, or with every line that names
// entry's hosts removed: dockerd 20.10 deletes a disconnected endpoint's
// record by its names, which takes the lines of the container's other
// addresses with it.
func hostsChanged(hosts string, op proto.Op, entry string) string {
	if op == proto.OpAddInterface {
		if hosts != "" && !strings.HasSuffix(hosts, "\n") {
			hosts += "\n"
		}
		return hosts + entry + "\n"
	}
	names := strings.Fields(entry)[1:]
	var b strings.Builder
	for _, line := range strings.SplitAfter(hosts, "\n") {
		if f := strings.Fields(line); len(f) > 1 && slices.Equal(f[1:], names) {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}
