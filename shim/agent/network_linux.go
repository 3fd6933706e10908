//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

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
		find := ifc.MAC
		if ifc.DeviceMAC != "" {
			find = ifc.DeviceMAC
		}
		l, err := waitForLink(ctx, find)
		if err != nil {
			return err
		}
		if find != ifc.MAC {
			if l, err = setMAC(l, ifc.MAC); err != nil {
				return err
			}
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

// setMAC gives a link that is still down its address, and returns the
// link with it. The link is not read back from the kernel: the steps that
// follow use only its index, name and MAC (as linkByMAC's do), and under
// TCG the rtnetlink request and the decoding of every attribute of the
// answer cost a template-started container 25-45 ms.
func setMAC(l netlink.Link, mac string) (netlink.Link, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return nil, fmt.Errorf("interface MAC %q: %w", mac, err)
	}
	if err := netlink.LinkSetHardwareAddr(l, hw); err != nil {
		return nil, fmt.Errorf("set MAC of %s to %s: %w", l.Attrs().Name, mac, err)
	}
	attrs := *l.Attrs()
	attrs.HardwareAddr = hw
	return &netlink.Device{LinkAttrs: attrs}, nil
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
		l, err := linkByMAC("/sys/class/net", want)
		if err != nil {
			return nil, err
		}
		if l != nil {
			return l, nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, errors.Join(fmt.Errorf("no network interface with MAC %s", mac), err)
		}
	}
}

// linkByMAC finds the interface with MAC want in sysClassNet
// (/sys/class/net), or returns nil. The link it returns carries only its
// index, name and MAC, which is all the calls that follow use. Read from
// sysfs rather than through an rtnetlink dump: under TCG the first dump
// and the decoding of every link's attributes took 50-120 ms of a cold
// container's start, against 5 ms for these few small files.
func linkByMAC(sysClassNet string, want net.HardwareAddr) (netlink.Link, error) {
	entries, err := os.ReadDir(sysClassNet)
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(sysClassNet, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "address"))
		if err != nil {
			continue // gone since the listing
		}
		hw, err := net.ParseMAC(strings.TrimSpace(string(b)))
		if err != nil || !bytes.Equal(hw, want) {
			continue
		}
		b, err = os.ReadFile(filepath.Join(dir, "ifindex"))
		if err != nil {
			continue
		}
		index, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("index of interface %s: %w", e.Name(), err)
		}
		return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: index, Name: e.Name(), HardwareAddr: hw}}, nil
	}
	return nil, nil
}

// ReaddressNetwork re-addresses interfaces that ConfigureNetwork set up,
// for a guest restored from another container's snapshot: each interface,
// found by name, takes its new MAC (virtio-net lets the guest change it),
// loses its old IPv4 addresses, gains the new one and announces it with a
// gratuitous ARP so that neighbours drop what they knew of the old owner.
func ReaddressNetwork(ctx context.Context, spec *proto.NetworkSpec) error {
	if spec == nil {
		return nil
	}
	var gateway net.IP
	var gatewayLink netlink.Link
	for _, ifc := range spec.Interfaces {
		l, err := netlink.LinkByName(ifc.Name)
		if err != nil {
			if l, err = waitForLink(ctx, ifc.MAC); err != nil {
				return fmt.Errorf("re-address %s: %w", ifc.Name, err)
			}
		}
		mac, err := net.ParseMAC(ifc.MAC)
		if err != nil {
			return fmt.Errorf("re-address %s: MAC %q: %w", ifc.Name, ifc.MAC, err)
		}
		if !strings.EqualFold(l.Attrs().HardwareAddr.String(), mac.String()) {
			if err := netlink.LinkSetHardwareAddr(l, mac); err != nil {
				return fmt.Errorf("set MAC of %s: %w", ifc.Name, err)
			}
		}
		addr, err := netlink.ParseAddr(ifc.Address)
		if err != nil {
			return fmt.Errorf("address of %s: %w", ifc.Name, err)
		}
		old, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			return fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		for _, o := range old {
			if o.IPNet.String() == addr.IPNet.String() {
				continue
			}
			if err := netlink.AddrDel(l, &o); err != nil {
				return fmt.Errorf("remove %s from %s: %w", o.IPNet, ifc.Name, err)
			}
		}
		if err := netlink.AddrReplace(l, addr); err != nil {
			return fmt.Errorf("add %s to %s: %w", ifc.Address, ifc.Name, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("bring up %s: %w", ifc.Name, err)
		}
		if ifc.Gateway != "" && gateway == nil {
			if gateway = net.ParseIP(ifc.Gateway); gateway == nil {
				return fmt.Errorf("gateway of %s: bad address %q", ifc.Name, ifc.Gateway)
			}
			gatewayLink = l
		}
		if err := announce(l.Attrs().Index, mac, addr.IP); err != nil {
			return fmt.Errorf("announce %s on %s: %w", addr.IP, ifc.Name, err)
		}
	}
	if gateway != nil {
		route := &netlink.Route{LinkIndex: gatewayLink.Attrs().Index, Gw: gateway}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("default route via %s: %w", gateway, err)
		}
	}
	return nil
}

// announce broadcasts a gratuitous ARP request (RFC 5227's ARP
// announcement: sender and target both the new address) on the interface.
// Hand-built: it is one 42-byte frame, and the guest has no arping.
func announce(ifindex int, mac net.HardwareAddr, ip net.IP) error {
	ip4 := ip.To4()
	if ip4 == nil {
		return nil
	}
	const ethPArp = 0x0806
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(ethPArp)))
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	defer unix.Close(fd)
	broadcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	pkt := make([]byte, 0, 28)
	pkt = append(pkt, 0, 1, 0x08, 0x00, 6, 4, 0, 1) // Ethernet, IPv4, request
	pkt = append(pkt, mac...)
	pkt = append(pkt, ip4...)
	pkt = append(pkt, 0, 0, 0, 0, 0, 0)
	pkt = append(pkt, ip4...)
	to := &unix.SockaddrLinklayer{Protocol: htons(ethPArp), Ifindex: ifindex, Halen: 6}
	copy(to.Addr[:], broadcast)
	if err := unix.Sendto(fd, pkt, 0, to); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// warmAddr and warmGateway are what WarmNetwork gives an interface for a
// moment: link-local addresses, never routed beyond the link, which in a
// pooled VM is a TAP on no bridge.
var (
	warmAddr    = &net.IPNet{IP: net.IPv4(169, 254, 123, 1), Mask: net.CIDRMask(30, 32)}
	warmGateway = net.IPv4(169, 254, 123, 2)
)

// WarmNetwork runs, on every interface that is down, what ConfigureNetwork
// will run on it (MAC change, renames, address, link up, default route)
// and undoes each step, leaving the interface down with its MAC, name and
// no address, as it was: OpWarm's share of the network. Under TCG the
// first ConfigureNetwork of a restored VM spent 75-160 ms translating
// this code, most of it on the MAC change and bringing the link up.
func WarmNetwork(ctx context.Context) error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	var errs []error
	for i, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 || a.Flags&net.FlagUp != 0 || len(a.HardwareAddr) != 6 {
			continue
		}
		if err := warmLink(l, i); err != nil {
			errs = append(errs, fmt.Errorf("warm %s: %w", a.Name, err))
		}
	}
	return errors.Join(errs...)
}

// warmLink puts l through ConfigureNetwork's steps and back. Every undo
// runs even when a step failed, so the link is left as found.
func warmLink(l netlink.Link, i int) (err error) {
	a := l.Attrs()
	name, mac := a.Name, slices.Clone(a.HardwareAddr)
	undo := func(what string, f func() error) {
		if uerr := f(); uerr != nil {
			err = errors.Join(err, fmt.Errorf("%s: %w", what, uerr))
		}
	}
	tmp := slices.Clone(mac)
	tmp[5] ^= 0xff
	if err := netlink.LinkSetHardwareAddr(l, tmp); err != nil {
		return fmt.Errorf("set MAC: %w", err)
	}
	defer undo("restore MAC", func() error { return netlink.LinkSetHardwareAddr(l, mac) })
	if err := netlink.LinkSetName(l, fmt.Sprintf("husktmp%d", i)); err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	defer undo("restore name", func() error { return netlink.LinkSetName(l, name) })
	addr := &netlink.Addr{IPNet: warmAddr}
	if err := netlink.AddrReplace(l, addr); err != nil {
		return fmt.Errorf("add address: %w", err)
	}
	defer undo("remove address", func() error { return netlink.AddrDel(l, addr) })
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("bring up: %w", err)
	}
	defer undo("bring down", func() error { return netlink.LinkSetDown(l) })
	route := &netlink.Route{LinkIndex: a.Index, Gw: warmGateway}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	return netlink.RouteDel(route)
}
