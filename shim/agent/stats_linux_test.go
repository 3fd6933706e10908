//go:build linux

package agent

import (
	"reflect"
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

func TestParseProcStat(t *testing.T) {
	const in = `cpu  100 5 20 1000 3 1 2 0 0 0
cpu0 60 5 10 500 1 1 1 0 0 0
cpu1 40 0 10 500 2 0 1 0 0 0
intr 12345
ctxt 999
`
	var st proto.GuestStats
	if err := parseProcStat(in, &st); err != nil {
		t.Fatal(err)
	}
	const tick = 10_000_000
	want := proto.GuestStats{
		CPUUser: 105 * tick, CPUSystem: 23 * tick, CPUTotal: 1131 * tick,
		PerCPU: []uint64{77 * tick, 51 * tick}, OnlineCPUs: 2,
	}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("parseProcStat = %+v, want %+v", st, want)
	}
	if err := parseProcStat("intr 1\n", &proto.GuestStats{}); err == nil {
		t.Error("no cpu line: no error")
	}
}

func TestParseMeminfo(t *testing.T) {
	got := parseMeminfo("MemTotal:         231284 kB\nMemAvailable:     190000 kB\nInactive(file):    1000 kB\nHugePages_Total:       0\n")
	want := map[string]uint64{"MemTotal": 231284 * 1024, "MemAvailable": 190000 * 1024, "Inactive(file)": 1000 * 1024, "HugePages_Total": 0}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseMeminfo = %v, want %v", got, want)
	}
}

func TestParseNetDev(t *testing.T) {
	const in = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     120       2    0    0    0     0          0         0      120       2    0    0    0     0       0          0
  eth0:    1500      10    1    2    0     0          0         0      900       7    3    4    0     0       0          0
`
	want := []proto.NetDevStats{{Name: "eth0", RxBytes: 1500, RxPackets: 10, RxErrors: 1, RxDropped: 2, TxBytes: 900, TxPackets: 7, TxErrors: 3, TxDropped: 4}}
	if got := parseNetDev(in); !reflect.DeepEqual(got, want) {
		t.Errorf("parseNetDev = %+v, want %+v", got, want)
	}
}

func TestParseDisk(t *testing.T) {
	d, ok := parseDisk("vda", "254:0\n", "     120        3     4096       50       10        0       80       20        0      100      70        0        0        0        0\n")
	want := proto.DiskStats{Name: "vda", Major: 254, Minor: 0, ReadOps: 120, ReadBytes: 4096 * 512, WriteOps: 10, WriteBytes: 80 * 512}
	if !ok || d != want {
		t.Errorf("parseDisk = %+v %v, want %+v", d, ok, want)
	}
	if _, ok := parseDisk("vda", "bad", "1 2 3 4 5 6 7"); ok {
		t.Error("bad dev accepted")
	}
}

func TestParseOOMKills(t *testing.T) {
	for _, tt := range []struct {
		vmstat string
		want   uint64
	}{
		{"nr_free_pages 100\noom_kill 3\nnr_zone_write_pending 0\n", 3},
		{"oom_kill 0\n", 0},
		{"nr_free_pages 100\n", 0}, // a kernel before 4.13
		{"oom_killx 9\noom_kill 12", 12},
	} {
		if got := parseOOMKills(tt.vmstat); got != tt.want {
			t.Errorf("parseOOMKills(%q) = %d, want %d", tt.vmstat, got, tt.want)
		}
	}
}
