package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// links is what the manager does to host interfaces; tests fake it.
type links interface {
	// ensureBridge creates (or keeps) a bridge with gw as its address and
	// brings it up.
	ensureBridge(name string, gw netip.Prefix, mtu int) error
	deleteLink(name string) error
	// addTap creates a persistent TAP enslaved to bridge and up.
	addTap(name, bridge string) error
	// list names the existing links whose name begins with prefix, and
	// says whether each is a bridge.
	list(prefix string) (map[string]bool, error)
	// hasUplink reports a default route: egress NAT is only useful then.
	hasUplink() (bool, error)
	// enableForwarding turns on IPv4 forwarding in the daemon's netns.
	enableForwarding() error
}

// netlinkLinks is links over rtnetlink in the daemon's network namespace.
type netlinkLinks struct{}

func (netlinkLinks) ensureBridge(name string, gw netip.Prefix, mtu int) error {
	l, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
		if err := netlink.LinkAdd(br); err != nil {
			return fmt.Errorf("create bridge %s: %w", name, err)
		}
		if l, err = netlink.LinkByName(name); err != nil {
			return fmt.Errorf("find bridge %s: %w", name, err)
		}
	case err != nil:
		return fmt.Errorf("find bridge %s: %w", name, err)
	case l.Type() != "bridge":
		return fmt.Errorf("%s exists and is a %s, not a bridge", name, l.Type())
	}
	// A bridge's MAC follows its ports' unless set: when a container's
	// TAP is its only port and is made again (a checkpoint restored into
	// its container), the gateway's MAC would change under the guest's
	// ARP cache, and the guest could not reach it for a minute. Fixed,
	// and derived from the gateway's address (which no container gets),
	// it also stays the same across daemon restarts.
	if mac := macFor(gw.Addr()); l.Attrs().HardwareAddr.String() != mac.String() {
		if err := netlink.LinkSetHardwareAddr(l, mac); err != nil {
			return fmt.Errorf("set MAC of bridge %s: %w", name, err)
		}
	}
	// Its TAPs take its MTU (addTap), as dockerd's veths take the
	// network's; 0 leaves the bridge's own.
	if mtu > 0 && l.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("set MTU of bridge %s: %w", name, err)
		}
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: gw.Addr().AsSlice(), Mask: net.CIDRMask(gw.Bits(), 32)}}
	if err := netlink.AddrReplace(l, addr); err != nil {
		return fmt.Errorf("address bridge %s with %s: %w", name, gw, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("bring up bridge %s: %w", name, err)
	}
	return nil
}

func (netlinkLinks) deleteLink(name string) error { return deleteLink(name) }

// deleteLink removes a link; one that is already gone is not an error.
func deleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

func (n netlinkLinks) addTap(name, bridge string) error {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("find bridge %s: %w", bridge, err)
	}
	// A TAP left by a crash under the same name is replaced: its owner is
	// gone, since names derive from container IDs.
	if err := n.deleteLink(name); err != nil {
		return err
	}
	tap := vmTap(name, br.Attrs().Index)
	if err := netlink.LinkAdd(tap); err != nil {
		return fmt.Errorf("create tap %s on %s: %w", name, bridge, err)
	}
	// Set after, as a TUNTAP is made by ioctl, which takes no MTU.
	if mtu := br.Attrs().MTU; mtu > 0 && mtu != 1500 {
		if err := netlink.LinkSetMTU(tap, mtu); err != nil {
			_ = n.deleteLink(name)
			return fmt.Errorf("set MTU of tap %s: %w", name, err)
		}
	}
	if err := netlink.LinkSetUp(tap); err != nil {
		_ = n.deleteLink(name)
		return fmt.Errorf("bring up tap %s: %w", name, err)
	}
	return nil
}

// vmTap is the TAP every VM NIC is backed by, enslaved to the bridge with
// index master (0: none). VNET_HDR lets QEMU offload checksums; single
// queue, as QEMU opens it without queues=.
func vmTap(name string, master int) *netlink.Tuntap {
	return &netlink.Tuntap{
		LinkAttrs: netlink.LinkAttrs{Name: name, MasterIndex: master},
		Mode:      netlink.TUNTAP_MODE_TAP,
		Flags:     netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR,
	}
}

// UnbridgedTaps makes TAPs on no bridge, made exactly as containers' are,
// for VMs whose NICs must be backed but send nothing: a template's guest
// boots on them, and the virtio-net features it negotiates must then
// hold for the containers' TAPs its restores get.
type UnbridgedTaps struct{}

// Add creates the persistent TAP name, down.
func (UnbridgedTaps) Add(name string) error {
	if err := netlink.LinkAdd(vmTap(name, 0)); err != nil {
		return fmt.Errorf("create template tap %s: %w", name, err)
	}
	return nil
}

// Delete removes the TAP name; one already gone is not an error.
func (UnbridgedTaps) Delete(name string) error { return deleteLink(name) }

func (netlinkLinks) list(prefix string) (map[string]bool, error) {
	all, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := map[string]bool{}
	for _, l := range all {
		if strings.HasPrefix(l.Attrs().Name, prefix) {
			out[l.Attrs().Name] = l.Type() == "bridge"
		}
	}
	return out, nil
}

func (netlinkLinks) hasUplink() (bool, error) {
	routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask) {
			return true, nil
		}
	}
	return false, nil
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

func (netlinkLinks) enableForwarding() error {
	// /proc/sys/net is per network namespace: this touches only the
	// daemon's.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	return nil
}
