package network

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
)

// A bridge keeps its MAC, derived from its gateway address, while its
// only TAP is deleted and made again, as when a checkpoint is restored
// into its container: a guest's ARP entry for the gateway stays right.
func TestBridgeMACIsFixed(t *testing.T) {
	ns := newTestNetns(t)
	gw := netip.MustParsePrefix("10.124.3.1/24")
	want := macFor(gw.Addr()).String()
	var macs []string
	err := ns.do(t, func() error {
		var l netlinkLinks
		if err := l.ensureBridge("husk-test", gw, 0); err != nil {
			return err
		}
		for range 2 {
			if err := l.addTap("hktest0", "husk-test"); err != nil {
				return err
			}
			br, err := netlink.LinkByName("husk-test")
			if err != nil {
				return err
			}
			macs = append(macs, br.Attrs().HardwareAddr.String())
			if err := l.deleteLink("hktest0"); err != nil {
				return err
			}
		}
		return l.ensureBridge("husk-test", gw, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, mac := range macs {
		if mac != want {
			t.Errorf("bridge MAC with TAP #%d: %s, want %s", i+1, mac, want)
		}
	}
}

// A network's MTU option is its bridge's MTU, which its TAPs take, so that
// frames of the containers' interfaces' size cross it.
func TestTapTakesBridgeMTU(t *testing.T) {
	ns := newTestNetns(t)
	gw := netip.MustParsePrefix("10.124.4.1/24")
	var got int
	err := ns.do(t, func() error {
		var l netlinkLinks
		if err := l.ensureBridge("husk-test", gw, 1400); err != nil {
			return err
		}
		if err := l.addTap("hktest0", "husk-test"); err != nil {
			return err
		}
		tap, err := netlink.LinkByName("hktest0")
		if err != nil {
			return err
		}
		got = tap.Attrs().MTU
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != 1400 {
		t.Errorf("TAP MTU %d, want the bridge's 1400", got)
	}
}
