//go:build linux

package agent

import (
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

func TestLimitFiles(t *testing.T) {
	for _, tt := range []struct {
		name   string
		limits proto.LimitsSpec
		want   map[string]string
	}{
		{"none", proto.LimitsSpec{}, map[string]string{"pids.max": "max", "memory.max": "max", "cpu.max": "max 100000", "cpuset.cpus": ""}},
		{"all", proto.LimitsSpec{PidsLimit: 10, MemoryLimit: 64 << 20, CPUQuota: 50_000, CPUPeriod: 200_000, CpusetCPUs: "1"},
			map[string]string{"pids.max": "10", "memory.max": "67108864", "cpu.max": "50000 200000", "cpuset.cpus": "1"}},
		{"quota of the default period", proto.LimitsSpec{CPUQuota: 25_000}, map[string]string{"pids.max": "max", "memory.max": "max", "cpu.max": "25000 100000", "cpuset.cpus": ""}},
	} {
		files := limitFiles(tt.limits)
		if len(files) != len(tt.want) {
			t.Fatalf("%s: %d files, want %d", tt.name, len(files), len(tt.want))
		}
		for _, f := range files {
			if f.value != tt.want[f.file] {
				t.Errorf("%s: %s = %q, want %q", tt.name, f.file, f.value, tt.want[f.file])
			}
			if f.limited == (f.value == "max" || f.value == "max 100000" || f.value == "") {
				t.Errorf("%s: %s limited = %v with %q", tt.name, f.file, f.limited, f.value)
			}
		}
	}
}

func TestGuestCpuset(t *testing.T) {
	for _, tt := range []struct {
		want, have, got string
		err             bool
	}{
		{"0", "0-1\n", "0", false},
		{"0-3", "0-1\n", "0-1", false},
		{"1,3", "0-1", "1", false},
		{"2-3", "0-1", "", false},
		{"0-", "0-1", "", true},
	} {
		got, err := guestCpuset(tt.want, tt.have)
		if got != tt.got || (err != nil) != tt.err {
			t.Errorf("guestCpuset(%q, %q) = %q, %v; want %q, error %v", tt.want, tt.have, got, err, tt.got, tt.err)
		}
	}
}
