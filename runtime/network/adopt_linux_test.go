package network

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestAdoptTapNetlink: a spare TAP held open (as a restored QEMU holds
// it) becomes the endpoint's TAP: same device, endpoint's name, on the
// bridge, up; the endpoint's own TAP is gone.
func TestAdoptTapNetlink(t *testing.T) {
	ns := newTestNetns(t)
	gw := netip.MustParsePrefix("10.124.4.1/24")
	err := ns.do(t, func() error {
		var l netlinkLinks
		if err := l.ensureBridge("husk-test", gw, 0); err != nil {
			return err
		}
		if err := l.addTap("hktest0", "husk-test"); err != nil {
			return err
		}
		if err := (UnbridgedTaps{}).Add("hskptest0"); err != nil {
			return err
		}
		spare, err := netlink.LinkByName("hskptest0")
		if err != nil {
			return err
		}
		fd, err := holdTap("hskptest0")
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := l.adoptTap("hskptest0", "hktest0", "husk-test"); err != nil {
			return err
		}
		if _, err := netlink.LinkByName("hskptest0"); err == nil {
			return fmt.Errorf("the spare still has its own name")
		}
		got, err := netlink.LinkByName("hktest0")
		if err != nil {
			return err
		}
		br, err := netlink.LinkByName("husk-test")
		if err != nil {
			return err
		}
		switch {
		case got.Attrs().Index != spare.Attrs().Index:
			return fmt.Errorf("hktest0 is device %d, not the spare %d", got.Attrs().Index, spare.Attrs().Index)
		case got.Attrs().MasterIndex != br.Attrs().Index:
			return fmt.Errorf("hktest0 has master %d, want the bridge %d", got.Attrs().MasterIndex, br.Attrs().Index)
		case got.Attrs().Flags&net.FlagUp == 0:
			return fmt.Errorf("hktest0 is down")
		}
		// A spare that does not exist leaves the endpoint a TAP.
		if err := l.adoptTap("hskpnone0", "hktest0", "husk-test"); err == nil {
			return fmt.Errorf("adopting a missing spare succeeded")
		}
		if _, err := netlink.LinkByName("hktest0"); err != nil {
			return fmt.Errorf("after a failed adoption: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// holdTap attaches to the persistent TAP name as QEMU does.
func holdTap(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("attach to %s: %w", name, err)
	}
	return fd, nil
}
