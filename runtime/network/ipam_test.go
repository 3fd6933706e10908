package network

import (
	"net/netip"
	"testing"

	"github.com/containerd/errdefs"
)

func TestPoolAllocatesLowestFreeAndNeverTwice(t *testing.T) {
	p, err := newPool(netip.MustParsePrefix("10.1.0.0/29"), netip.MustParseAddr("10.1.0.1"), netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	// /29: .0 network, .1 gateway, .7 broadcast → .2 to .6.
	var got []string
	for i := range 5 {
		a, err := p.allocate(string(rune('a' + i)))
		if err != nil {
			t.Fatalf("allocate %d: %v", i, err)
		}
		got = append(got, a.String())
	}
	want := []string{"10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("allocations = %v, want %v", got, want)
		}
	}
	if _, err := p.allocate("f"); !errdefs.IsUnavailable(err) {
		t.Fatalf("allocate from a full pool: err = %v, want unavailable", err)
	}
	p.release(netip.MustParseAddr("10.1.0.4"), "someone-else")
	if _, err := p.allocate("f"); err == nil {
		t.Fatal("release by a non-owner freed the address")
	}
	p.release(netip.MustParseAddr("10.1.0.4"), "c")
	if a, err := p.allocate("f"); err != nil || a.String() != "10.1.0.4" {
		t.Fatalf("after release: %v, %v; want 10.1.0.4", a, err)
	}
}

func TestPoolClaim(t *testing.T) {
	p, err := newPool(netip.MustParsePrefix("10.2.0.0/24"), netip.MustParseAddr("10.2.0.1"), netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr, owner string
		ok          bool
	}{
		{"10.2.0.9", "a", true},
		{"10.2.0.9", "a", true}, // the same owner again: restoring from disk
		{"10.2.0.9", "b", false},
		{"10.2.0.1", "b", false},   // gateway
		{"10.2.0.0", "b", false},   // network address
		{"10.2.0.255", "b", false}, // broadcast
		{"10.3.0.5", "b", false},   // outside
	}
	for _, tt := range tests {
		err := p.claim(netip.MustParseAddr(tt.addr), tt.owner)
		if (err == nil) != tt.ok {
			t.Errorf("claim(%s, %s) = %v, want ok=%v", tt.addr, tt.owner, err, tt.ok)
		}
	}
	if a, _ := p.allocate("c"); a.String() != "10.2.0.2" {
		t.Errorf("allocate after claims = %s, want 10.2.0.2", a)
	}
	if p.inUse() != 2 {
		t.Errorf("inUse = %d, want 2", p.inUse())
	}
}

func TestNewPoolRejects(t *testing.T) {
	tests := []struct{ subnet, gw string }{
		{"10.0.0.0/31", "10.0.0.1"},
		{"10.0.0.0/24", "10.0.1.1"},
		{"10.0.0.0/24", "10.0.0.0"},
		{"10.0.0.0/24", "10.0.0.255"},
		{"fd00::/64", "fd00::1"},
	}
	for _, tt := range tests {
		if _, err := newPool(netip.MustParsePrefix(tt.subnet), netip.MustParseAddr(tt.gw), netip.Prefix{}); err == nil {
			t.Errorf("newPool(%s, %s) accepted", tt.subnet, tt.gw)
		}
	}
}

func TestLastAddrAndMAC(t *testing.T) {
	for prefix, want := range map[string]string{
		"10.123.0.0/16": "10.123.255.255", "10.124.5.0/24": "10.124.5.255", "192.168.0.16/28": "192.168.0.31",
	} {
		if got := lastAddr(netip.MustParsePrefix(prefix)).String(); got != want {
			t.Errorf("lastAddr(%s) = %s, want %s", prefix, got, want)
		}
	}
	if got := macFor(netip.MustParseAddr("172.17.0.2")).String(); got != "02:42:ac:11:00:02" {
		t.Errorf("macFor(172.17.0.2) = %s, want dockerd's 02:42:ac:11:00:02", got)
	}
}

// TestPoolIPRange: --ip-range narrows what is handed out, from the
// range's first address (dockerd with --gateway 10.9.0.1 hands out
// 10.9.0.200 first from 10.9.0.200/29) but never the subnet's own address
// or broadcast; a static address may still be anywhere in the subnet.
func TestPoolIPRange(t *testing.T) {
	for _, tc := range []struct {
		ipRange     string
		first, last string
		count       int
	}{
		{"10.9.0.200/29", "10.9.0.200", "10.9.0.207", 8},
		{"10.9.0.248/29", "10.9.0.248", "10.9.0.254", 7},
		{"10.9.0.0/30", "10.9.0.2", "10.9.0.3", 2},
	} {
		p, err := newPool(netip.MustParsePrefix("10.9.0.0/24"), netip.MustParseAddr("10.9.0.1"), netip.MustParsePrefix(tc.ipRange))
		if err != nil {
			t.Fatal(err)
		}
		var got []netip.Addr
		for {
			a, err := p.allocate("c" + string(rune('a'+len(got))))
			if err != nil {
				break
			}
			got = append(got, a)
		}
		if len(got) != tc.count || got[0].String() != tc.first || got[len(got)-1].String() != tc.last {
			t.Errorf("range %s handed out %v, want %d from %s to %s", tc.ipRange, got, tc.count, tc.first, tc.last)
		}
		if err := p.claim(netip.MustParseAddr("10.9.0.5"), "static"); err != nil {
			t.Errorf("range %s: a static address outside the range: %v", tc.ipRange, err)
		}
	}
	if _, err := newPool(netip.MustParsePrefix("10.9.0.0/24"), netip.MustParseAddr("10.9.0.1"), netip.MustParsePrefix("10.10.0.0/25")); err == nil {
		t.Errorf("a range outside the subnet was accepted")
	}
}
