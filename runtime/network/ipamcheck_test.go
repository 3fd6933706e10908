package network

import (
	"net/netip"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
)

// TestValidateIPAM: every problem of every pool is reported together, in
// dockerd's words and order; IPv6 pools are checked only with IPv6 on.
func TestValidateIPAM(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pools []IPAMPool
		ipv6  bool
		want  string
	}{
		{name: "none"},
		{name: "good", pools: []IPAMPool{{Subnet: "10.3.0.0/24", IPRange: "10.3.0.128/25", Gateway: "10.3.0.1", AuxAddress: map[string]string{"r": "10.3.0.2"}}}},
		{name: "no subnet", pools: []IPAMPool{{IPRange: "10.3.0.0/25"}}, want: "invalid subnet : invalid CIDR block notation"},
		{name: "host bits", pools: []IPAMPool{{Subnet: "10.3.0.1/24"}}, want: "invalid subnet 10.3.0.1/24: it should be 10.3.0.0/24"},
		{name: "range outside and too big", pools: []IPAMPool{{Subnet: "10.3.0.0/24", IPRange: "10.4.0.1/16"}},
			want: "* invalid ip-range 10.4.0.1/16: CIDR block is bigger than its parent subnet 10.3.0.0/24\n" +
				"* invalid ip-range 10.4.0.1/16: it should be 10.4.0.0/16\n" +
				"* invalid ip-range 10.4.0.1/16: parent subnet 10.3.0.0/24 doesn't contain ip-range"},
		{name: "range of the other family", pools: []IPAMPool{{Subnet: "10.3.0.0/24", IPRange: "fd00::/64"}}, want: "invalid ip-range fd00::/64: parent subnet is an IPv4 block"},
		{name: "gateway outside", pools: []IPAMPool{{Subnet: "10.3.0.0/24", Gateway: "10.4.0.1"}}, want: "invalid gateway 10.4.0.1: parent subnet 10.3.0.0/24 doesn't contain this address"},
		{name: "gateway of the other family", pools: []IPAMPool{{Subnet: "10.3.0.0/24", Gateway: "fd00::1"}}, want: "invalid gateway fd00::1: parent subnet is an IPv4 block"},
		{name: "IPv6 unchecked without IPv6", pools: []IPAMPool{{Subnet: "fd00::1/64"}}},
		{name: "IPv6 checked with IPv6", pools: []IPAMPool{{Subnet: "fd00::1/64"}}, ipv6: true, want: "invalid subnet fd00::1/64: it should be fd00::/64"},
		{name: "two pools", pools: []IPAMPool{{Subnet: "x"}, {Subnet: "10.3.0.0/24", Gateway: "y"}},
			want: "* invalid subnet x: invalid CIDR block notation\n* invalid gateway y: invalid address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateIPAM(tc.pools, tc.ipv6)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ValidateIPAM = %v, want nil", err)
				}
				return
			}
			if want := "invalid network config:\n" + tc.want; err == nil || err.Error() != want || !errdefs.IsInvalidArgument(err) {
				t.Errorf("ValidateIPAM = %v, want invalid argument %q", err, want)
			}
		})
	}
}

// TestPoolsOf: decoded pools come back as the strings they were, with
// an unset address empty rather than "invalid IP".
func TestPoolsOf(t *testing.T) {
	got := PoolsOf(&network.IPAM{Config: []network.IPAMConfig{{
		Subnet:     netip.MustParsePrefix("10.3.0.1/24"),
		AuxAddress: map[string]netip.Addr{"a": netip.MustParseAddr("10.3.0.2")},
	}}})
	if len(got) != 1 || got[0].Subnet != "10.3.0.1/24" || got[0].IPRange != "" || got[0].Gateway != "" || got[0].AuxAddress["a"] != "10.3.0.2" {
		t.Errorf("PoolsOf = %+v", got)
	}
	if PoolsOf(nil) != nil {
		t.Error("PoolsOf(nil) is not nil")
	}
}
