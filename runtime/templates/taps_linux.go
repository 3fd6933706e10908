package templates

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// netlinkTaps makes TAPs as the network package makes containers' (no
// packet info, virtio-net headers), so that the virtio-net features a
// template's guest negotiated hold for the TAPs its restores get. They
// are on no bridge: a template's guest sends nothing before it is
// snapshotted.
type netlinkTaps struct{}

func (netlinkTaps) Add(name string) error {
	tap := &netlink.Tuntap{
		LinkAttrs: netlink.LinkAttrs{Name: name},
		Mode:      netlink.TUNTAP_MODE_TAP,
		Flags:     netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR,
	}
	if err := netlink.LinkAdd(tap); err != nil {
		return fmt.Errorf("create template tap %s: %w", name, err)
	}
	return nil
}

func (netlinkTaps) Delete(name string) error {
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
