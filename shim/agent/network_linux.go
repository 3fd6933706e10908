//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/husk-vm/husk/shim/proto"
)

// ConfigureNetwork gives the guest the interfaces spec describes: each
// virtio-net device, found by MAC, is renamed, addressed and brought up,
// and the default route goes through the one interface with a gateway.
// The guest has no ip(8), so this speaks rtnetlink itself.
func ConfigureNetwork(ctx context.Context, spec *proto.NetworkSpec) error {
	if spec == nil || len(spec.Interfaces) == 0 {
		return nil
	}
	links := make([]netlink.Link, len(spec.Interfaces))
	for i, ifc := range spec.Interfaces {
		l, err := waitForLink(ctx, ifc.MAC)
		if err != nil {
			return err
		}
		links[i] = l
	}
	// Rename through temporary names first: the kernel's own ethN order
	// need not match ours, and two interfaces cannot swap names directly.
	for i, l := range links {
		if l.Attrs().Name == spec.Interfaces[i].Name {
			continue
		}
		if err := netlink.LinkSetName(l, fmt.Sprintf("husktmp%d", i)); err != nil {
			return fmt.Errorf("rename %s: %w", l.Attrs().Name, err)
		}
	}
	var gateway *net.IP
	var gatewayLink netlink.Link
	for i, ifc := range spec.Interfaces {
		l := links[i]
		if l.Attrs().Name != ifc.Name {
			if err := netlink.LinkSetName(l, ifc.Name); err != nil {
				return fmt.Errorf("rename interface %s to %s: %w", ifc.MAC, ifc.Name, err)
			}
		}
		if ifc.MTU > 0 {
			if err := netlink.LinkSetMTU(l, ifc.MTU); err != nil {
				return fmt.Errorf("set MTU of %s: %w", ifc.Name, err)
			}
		}
		addr, err := netlink.ParseAddr(ifc.Address)
		if err != nil {
			return fmt.Errorf("address of %s: %w", ifc.Name, err)
		}
		if err := netlink.AddrReplace(l, addr); err != nil {
			return fmt.Errorf("add %s to %s: %w", ifc.Address, ifc.Name, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("bring up %s: %w", ifc.Name, err)
		}
		if ifc.Gateway != "" && gateway == nil {
			gw := net.ParseIP(ifc.Gateway)
			if gw == nil {
				return fmt.Errorf("gateway of %s: bad address %q", ifc.Name, ifc.Gateway)
			}
			gateway, gatewayLink = &gw, l
		}
	}
	if gateway != nil {
		route := &netlink.Route{LinkIndex: gatewayLink.Attrs().Index, Gw: *gateway}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("default route via %s: %w", *gateway, err)
		}
	}
	return nil
}

// waitForLink finds the interface with the given MAC, waiting briefly:
// virtio-net may still be probing when the host's setup arrives.
func waitForLink(ctx context.Context, mac string) (netlink.Link, error) {
	want, err := net.ParseMAC(mac)
	if err != nil {
		return nil, fmt.Errorf("interface MAC %q: %w", mac, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
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
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, errors.Join(fmt.Errorf("no network interface with MAC %s", mac), err)
		}
	}
}
