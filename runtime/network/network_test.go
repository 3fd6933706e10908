package network

import "testing"

func TestNetworkMTU(t *testing.T) {
	for _, tc := range []struct {
		opt  string
		want int
	}{
		{"", 0}, {"1400", 1400}, {"9000", 9000}, {"abc", 0}, {"0", 0}, {"67", 0}, {"70000", 0},
	} {
		n := &netState{rec: netRecord{Options: map[string]string{}}}
		if tc.opt != "" {
			n.rec.Options[mtuOption] = tc.opt
		}
		if got := n.mtu(); got != tc.want {
			t.Errorf("mtu with option %q = %d, want %d", tc.opt, got, tc.want)
		}
	}
}
