package containers

import (
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/shim/proto"
)

// cliCPUPercent is the docker CLI's calculateCPUPercentUnix.
func cliCPUPercent(prev, cur container.CPUStats) float64 {
	cpuDelta := float64(cur.CPUUsage.TotalUsage) - float64(prev.CPUUsage.TotalUsage)
	sysDelta := float64(cur.SystemUsage) - float64(prev.SystemUsage)
	if cpuDelta <= 0 || sysDelta <= 0 {
		return 0
	}
	return cpuDelta / sysDelta * float64(cur.OnlineCPUs) * 100
}

func TestFillStats(t *testing.T) {
	const s = uint64(time.Second)
	// Two vCPUs over one second: the guest was busy for 1.5 s of its 2.
	prev := &proto.GuestStats{CPUUser: 10 * s, CPUSystem: 2 * s, CPUTotal: 40 * s, OnlineCPUs: 2, PerCPU: []uint64{6 * s, 6 * s}}
	cur := &proto.GuestStats{
		CPUUser: 11 * s, CPUSystem: 2*s + s/2, CPUTotal: 42 * s, OnlineCPUs: 2, PerCPU: []uint64{7 * s, 6*s + s/2},
		Memory:   map[string]uint64{"MemTotal": 200 << 20, "MemFree": 150 << 20, "Inactive(file)": 10 << 20},
		Networks: []proto.NetDevStats{{Name: "eth0", RxBytes: 100, TxBytes: 50}},
		Disks:    []proto.DiskStats{{Name: "vdb", Major: 254, Minor: 16, WriteBytes: 4096, WriteOps: 1}, {Name: "vda", Major: 254, ReadBytes: 8192, ReadOps: 2}},
		Pids:     3,
	}
	var a, b container.StatsResponse
	fillStats(&a, prev, 256<<20, time.Unix(1, 0))
	fillStats(&b, cur, 256<<20, time.Unix(2, 0))
	if got := cliCPUPercent(a.CPUStats, b.CPUStats); got != 150 {
		t.Errorf("CLI CPU %% = %v, want 150", got)
	}
	if b.MemoryStats.Usage != 50<<20 || b.MemoryStats.Limit != 256<<20 || b.MemoryStats.Stats["inactive_file"] != 10<<20 {
		t.Errorf("memory = %+v", b.MemoryStats)
	}
	if n := b.Networks["eth0"]; n.RxBytes != 100 || n.TxBytes != 50 || len(b.Networks) != 1 {
		t.Errorf("networks = %+v", b.Networks)
	}
	want := []container.BlkioStatEntry{
		{Major: 254, Minor: 0, Op: "read", Value: 8192}, {Major: 254, Minor: 0, Op: "write", Value: 0},
		{Major: 254, Minor: 16, Op: "read", Value: 0}, {Major: 254, Minor: 16, Op: "write", Value: 4096},
	}
	if got := b.BlkioStats.IoServiceBytesRecursive; len(got) != len(want) {
		t.Errorf("blkio = %+v", got)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("blkio[%d] = %+v, want %+v", i, got[i], want[i])
			}
		}
	}
	if b.PidsStats.Current != 3 || !b.Read.Equal(time.Unix(2, 0)) {
		t.Errorf("pids %d, read %v", b.PidsStats.Current, b.Read)
	}

	// With a cgroup of its own, the container is measured by it.
	cur.CgroupMemory, cur.CgroupMemoryStat = 5<<20, map[string]uint64{"anon": 4 << 20, "inactive_file": 1 << 20}
	fillStats(&b, cur, 32<<20, time.Unix(3, 0))
	if b.MemoryStats.Usage != 5<<20 || b.MemoryStats.Limit != 32<<20 || b.MemoryStats.Stats["inactive_file"] != 1<<20 {
		t.Errorf("memory with a cgroup = %+v", b.MemoryStats)
	}
	if b.CPUStats.ThrottlingData != (container.ThrottlingData{}) {
		t.Errorf("throttling without the cpu controller = %+v", b.CPUStats.ThrottlingData)
	}
	// With a CPU quota, its cpu.stat says how often it was held back.
	cur.CgroupCPUStat = map[string]uint64{"usage_usec": 9, "nr_periods": 20, "nr_throttled": 7, "throttled_usec": 350_000}
	fillStats(&b, cur, 32<<20, time.Unix(4, 0))
	if want := (container.ThrottlingData{Periods: 20, ThrottledPeriods: 7, ThrottledTime: 350_000_000}); b.CPUStats.ThrottlingData != want {
		t.Errorf("throttling = %+v, want %+v", b.CPUStats.ThrottlingData, want)
	}
}
