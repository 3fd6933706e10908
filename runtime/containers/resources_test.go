package containers

import (
	"fmt"
	"slices"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/blkiodev"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/shim/proto"
)

// capMask is the capability set as /proc/self/status shows it.
func capMask(t *testing.T, names []string) string {
	t.Helper()
	all := proto.CapabilityNames()
	var m uint64
	for _, n := range names {
		i := slices.Index(all, n)
		if i < 0 {
			t.Fatalf("unknown capability %s", n)
		}
		m |= 1 << i
	}
	return fmt.Sprintf("%016x", m)
}

// TestContainerCapabilities compares with the CapBnd dockerd 20.10 (runc)
// shows for the same flags.
func TestContainerCapabilities(t *testing.T) {
	tests := []struct {
		add, drop  []string
		privileged bool
		want       string
	}{
		{nil, nil, false, "00000000a80425fb"},
		{nil, []string{"ALL"}, false, "0000000000000000"},
		{[]string{"CAP_NET_ADMIN"}, nil, false, "00000000a80435fb"},
		{[]string{"CAP_CHOWN"}, []string{"ALL"}, false, "0000000000000001"},
		{nil, []string{"CAP_CHOWN", "CAP_NET_RAW"}, false, "00000000a80405fa"},
		{[]string{"CAP_SYS_ADMIN"}, nil, false, "00000000a82425fb"},
		{[]string{"ALL"}, []string{"CAP_CHOWN"}, false, "000001fffffffffe"},
		{nil, []string{"ALL"}, true, "000001ffffffffff"},
	}
	for _, tt := range tests {
		hc := &container.HostConfig{CapAdd: tt.add, CapDrop: tt.drop}
		if got := capMask(t, containerCapabilities(hc, tt.privileged).Bounding); got != tt.want {
			t.Errorf("add %v drop %v privileged %v: %s, want %s", tt.add, tt.drop, tt.privileged, got, tt.want)
		}
	}
}

func TestValidateResources(t *testing.T) {
	tests := []struct {
		hc   container.HostConfig
		want string
	}{
		{container.HostConfig{CapAdd: []string{"bogus"}}, `invalid CapAdd: unknown capability: "CAP_BOGUS"`},
		{container.HostConfig{CapDrop: []string{"bogus"}}, `invalid CapDrop: unknown capability: "CAP_BOGUS"`},
		{container.HostConfig{ShmSize: -1}, "SHM size can not be less than 0"},
		{container.HostConfig{Sysctls: map[string]string{"vm.swappiness": "1"}}, `sysctl "vm.swappiness" is not in a separate kernel namespace`},
		{container.HostConfig{Resources: container.Resources{Ulimits: []*container.Ulimit{{Name: "bogus", Soft: 1, Hard: 1}}}}, "invalid ulimit type: bogus"},
		{container.HostConfig{Resources: container.Resources{Ulimits: []*container.Ulimit{{Name: "nofile", Soft: 2048, Hard: 1024}}}}, "ulimit soft limit must be less than or equal to hard limit: 2048 > 1024"},
		{container.HostConfig{Resources: container.Resources{Memory: 64 << 20, MemoryReservation: 128 << 20}}, "Minimum memory limit can not be less than memory reservation limit, see usage"},
		{container.HostConfig{Resources: container.Resources{MemoryReservation: 1 << 20}}, "Minimum memory reservation allowed is 6MB"},
		{container.HostConfig{Resources: container.Resources{Memory: 64 << 20, MemorySwap: 32 << 20}}, "Minimum memoryswap limit should be larger than memory limit, see usage"},
		{container.HostConfig{Resources: container.Resources{MemorySwap: 32 << 20}}, "You should always set the Memory limit when using Memoryswap limit, see usage"},
		{container.HostConfig{Resources: container.Resources{CPUPeriod: 500}}, "CPU cfs period can not be less than 1ms (i.e. 1000) or larger than 1s (i.e. 1000000)"},
		{container.HostConfig{Resources: container.Resources{CPUQuota: 500}}, "CPU cfs quota can not be less than 1ms (i.e. 1000)"},
		{container.HostConfig{OomScoreAdj: 1001}, "Invalid value 1001, range for oom score adj is [-1000, 1000]"},
		{container.HostConfig{Resources: container.Resources{Memory: 4 << 20}}, "Minimum memory limit allowed is 6MB"},
		{container.HostConfig{Resources: container.Resources{NanoCPUs: 1e9, CPUPeriod: 50000}}, "Conflicting options: Nano CPUs and CPU Period cannot both be set"},
		{container.HostConfig{Resources: container.Resources{NanoCPUs: 1e9, CPUQuota: 50000}}, "Conflicting options: Nano CPUs and CPU Quota cannot both be set"},
	}
	for _, tt := range tests {
		err := validateResources(&tt.hc)
		if err == nil || err.Error() != tt.want || !errdefs.IsInvalidArgument(err) {
			t.Errorf("%+v: %v, want invalid argument %q", tt.hc, err, tt.want)
		}
	}
	hc := container.HostConfig{CapAdd: []string{"net_admin", "all"}, CapDrop: []string{"CAP_CHOWN"},
		Sysctls:   map[string]string{"net.ipv4.ip_forward": "1", "kernel.shmmax": "1", "fs.mqueue.msg_max": "100"},
		Resources: container.Resources{Ulimits: []*container.Ulimit{{Name: "nofile", Soft: 1024, Hard: 2048}, {Name: "core", Soft: -1, Hard: -1}}}}
	if err := validateResources(&hc); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hc.CapAdd, []string{"CAP_NET_ADMIN", "ALL"}) || hc.ShmSize != 64<<20 {
		t.Errorf("normalised to CapAdd %v, ShmSize %d", hc.CapAdd, hc.ShmSize)
	}
}

func TestCreateDefaults(t *testing.T) {
	notGiven := int64(-1)
	hc := container.HostConfig{Resources: container.Resources{Memory: 64 << 20, MemorySwappiness: &notGiven}}
	if err := validateResources(&hc); err != nil {
		t.Fatal(err)
	}
	if hc.MemorySwap != 128<<20 || hc.MemorySwappiness != nil || hc.IpcMode != "private" || hc.CgroupnsMode != "host" ||
		hc.OomKillDisable == nil || *hc.OomKillDisable {
		t.Errorf("defaults: MemorySwap %d, MemorySwappiness %v, IpcMode %q, CgroupnsMode %q, OomKillDisable %v",
			hc.MemorySwap, hc.MemorySwappiness, hc.IpcMode, hc.CgroupnsMode, hc.OomKillDisable)
	}
	ten, yes := int64(10), true
	given := container.HostConfig{IpcMode: "shareable", CgroupnsMode: "private",
		Resources: container.Resources{Memory: 64 << 20, MemorySwap: -1, MemorySwappiness: &ten, OomKillDisable: &yes}}
	if err := validateResources(&given); err != nil {
		t.Fatal(err)
	}
	if given.MemorySwap != -1 || *given.MemorySwappiness != 10 || given.IpcMode != "shareable" || given.CgroupnsMode != "private" || !*given.OomKillDisable {
		t.Errorf("given settings changed: %+v", given)
	}
}

// TestSystemPaths: dockerd's masked and read-only paths by default, the
// client's lists when it gives them (empty ones for systempaths=unconfined),
// none for a privileged container, and the agent told only what applies.
func TestSystemPaths(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		hc                   container.HostConfig
		wantMasked, wantRO   []string
		agentMasked, agentRO int
	}{
		{"default", container.HostConfig{}, defaultMaskedPaths(), defaultReadonlyPaths(), len(defaultMaskedPaths()), len(defaultReadonlyPaths())},
		{"privileged", container.HostConfig{Privileged: true}, nil, nil, 0, 0},
		{"unconfined", container.HostConfig{MaskedPaths: []string{}, ReadonlyPaths: []string{}}, []string{}, []string{}, 0, 0},
		{"given", container.HostConfig{MaskedPaths: []string{"/proc/x"}}, []string{"/proc/x"}, defaultReadonlyPaths(), 1, len(defaultReadonlyPaths())},
		{"privileged with lists", container.HostConfig{Privileged: true, MaskedPaths: []string{"/proc/x"}}, []string{"/proc/x"}, nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := tc.hc
			if err := validateResources(&hc); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(hc.MaskedPaths, tc.wantMasked) || (hc.MaskedPaths == nil) != (tc.wantMasked == nil) ||
				!slices.Equal(hc.ReadonlyPaths, tc.wantRO) || (hc.ReadonlyPaths == nil) != (tc.wantRO == nil) {
				t.Errorf("stored MaskedPaths %#v ReadonlyPaths %#v, want %#v %#v", hc.MaskedPaths, hc.ReadonlyPaths, tc.wantMasked, tc.wantRO)
			}
			s := containerSettings(&hc)
			if len(s.MaskedPaths) != tc.agentMasked || len(s.ReadonlyPaths) != tc.agentRO {
				t.Errorf("agent told %d masked and %d read-only paths, want %d and %d", len(s.MaskedPaths), len(s.ReadonlyPaths), tc.agentMasked, tc.agentRO)
			}
		})
	}
}

func TestCreateWarnings(t *testing.T) {
	disable := true
	for _, tt := range []struct {
		hc   container.HostConfig
		want []string
	}{
		{container.HostConfig{}, []string{}},
		{container.HostConfig{Resources: container.Resources{OomKillDisable: &disable}},
			[]string{"OOM killer is disabled for the container, but no memory limit is set, this can result in the system running out of resources."}},
		{container.HostConfig{Resources: container.Resources{OomKillDisable: &disable, Memory: 100 << 20}}, []string{}},
		{container.HostConfig{Resources: container.Resources{BlkioWeight: 300, BlkioWeightDevice: []*blkiodev.WeightDevice{{Path: "/dev/null", Weight: 100}}}},
			[]string{"Your kernel does not support Block I/O weight or the cgroup is not mounted. Weight discarded.",
				"Your kernel does not support Block I/O weight_device or the cgroup is not mounted. Weight-device discarded."}},
		{container.HostConfig{Resources: container.Resources{
			BlkioDeviceReadBps: []*blkiodev.ThrottleDevice{{Path: "/dev/sda", Rate: 1 << 20}}, BlkioDeviceWriteBps: []*blkiodev.ThrottleDevice{{Path: "/dev/sda", Rate: 1 << 20}},
			BlkioDeviceReadIOps: []*blkiodev.ThrottleDevice{{Path: "/dev/sda", Rate: 100}}, BlkioDeviceWriteIOps: []*blkiodev.ThrottleDevice{{Path: "/dev/sda", Rate: 100}},
		}}, []string{
			"Your kernel does not support BPS Block I/O read limit or the cgroup is not mounted. Block I/O BPS read limit discarded.",
			"Your kernel does not support BPS Block I/O write limit or the cgroup is not mounted. Block I/O BPS write limit discarded.",
			"Your kernel does not support IOPS Block read limit or the cgroup is not mounted. Block I/O IOPS read limit discarded.",
			"Your kernel does not support IOPS Block write limit or the cgroup is not mounted. Block I/O IOPS write limit discarded."}},
	} {
		if got := createWarnings(&tt.hc); !slices.Equal(got, tt.want) || got == nil {
			t.Errorf("%+v: warnings %q, want %q", tt.hc.Resources, got, tt.want)
		}
	}
}
