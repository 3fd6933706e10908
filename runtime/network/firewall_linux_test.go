package network

import (
	"net/netip"
	"os"
	"testing"

	"github.com/google/nftables"
)

func TestFirewallInNetns(t *testing.T) {
	ns := newTestNetns(t)
	f, err := os.Open(ns.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fw := nftFirewall{netnsFd: int(f.Fd())}
	nets := []fwNetwork{
		{Bridge: "husk0", Subnet: netip.MustParsePrefix("10.123.0.0/16")},
		{Bridge: "husk-aaaa", Subnet: netip.MustParsePrefix("10.124.0.0/24")},
		{Bridge: "husk-bbbb", Subnet: netip.MustParsePrefix("10.124.1.0/24"), Internal: true},
	}
	rules := func() map[string]int {
		c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseLasting()
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, tb := range tables {
			if tb.Name != tableName {
				continue
			}
			chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
			if err != nil {
				t.Fatal(err)
			}
			for _, ch := range chains {
				rs, err := c.GetRules(tb, ch)
				if err != nil {
					t.Fatal(err)
				}
				out[ch.Name] = len(rs)
			}
		}
		return out
	}
	if err := fw.apply(nets, true); err != nil {
		t.Fatalf("apply with NAT: %v", err)
	}
	// Two isolated networks get one rule each, the internal one two; NAT
	// for the two that are not internal.
	if got := rules(); got["forward"] != 4 || got["postrouting"] != 2 {
		t.Errorf("rules after apply(nat) = %v, want forward:4 postrouting:2", got)
	}
	// Applying again replaces, never duplicates.
	if err := fw.apply(nets[:1], false); err != nil {
		t.Fatalf("apply again: %v", err)
	}
	if got := rules(); got["forward"] != 1 || got["postrouting"] != 0 {
		t.Errorf("rules after re-apply without NAT = %v, want forward:1 only", got)
	}
	if err := fw.remove(); err != nil {
		t.Fatal(err)
	}
	if got := rules(); len(got) != 0 {
		t.Errorf("rules after remove = %v, want no table", got)
	}
	if err := fw.remove(); err != nil {
		t.Errorf("second remove: %v", err)
	}
}
