package network

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

var _ tapAdopter = netlinkLinks{}

func (n netlinkLinks) adoptTap(spare, name, bridge string) (err error) {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("find bridge %s: %w", bridge, err)
	}
	sp, err := netlink.LinkByName(spare)
	if err != nil {
		return fmt.Errorf("find tap %s: %w", spare, err)
	}
	if err := n.deleteLink(name); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// The endpoint must keep a TAP on its bridge: make it one.
			if aerr := n.addTap(name, bridge); aerr != nil {
				err = errors.Join(err, aerr)
			}
		}
	}()
	// A link is renamed only while it is down; a spare is made down.
	if err := netlink.LinkSetName(sp, name); err != nil {
		return fmt.Errorf("rename tap %s to %s: %w", spare, name, err)
	}
	if mtu := br.Attrs().MTU; mtu > 0 && sp.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(sp, mtu); err != nil {
			return fmt.Errorf("set MTU of tap %s: %w", name, err)
		}
	}
	if err := netlink.LinkSetMasterByIndex(sp, br.Attrs().Index); err != nil {
		return fmt.Errorf("put tap %s on bridge %s: %w", name, bridge, err)
	}
	if err := netlink.LinkSetUp(sp); err != nil {
		return fmt.Errorf("bring up tap %s: %w", name, err)
	}
	return nil
}
