package agent

import "testing"

func TestParsePCIAddress(t *testing.T) {
	tests := []struct {
		in   string
		slot int
		ok   bool
	}{
		{"0000:00:05.0", 5, true},
		{"0000:00:0f.0", 15, true},
		{"virtio1", 0, false},
		{"0000:00:05", 0, false},
		{"devices", 0, false},
	}
	for _, tt := range tests {
		_, _, slot, _, ok := parsePCIAddress(tt.in)
		if ok != tt.ok || ok && slot != tt.slot {
			t.Errorf("parsePCIAddress(%q) = slot %d, %v; want %d, %v", tt.in, slot, ok, tt.slot, tt.ok)
		}
	}
}
