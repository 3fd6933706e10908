package containers

import (
	"testing"

	"github.com/moby/moby/api/types/container"
)

func TestApplyUpdate(t *testing.T) {
	pids := int64(50)
	for _, tt := range []struct {
		name    string
		start   container.HostConfig
		opts    UpdateOptions
		check   func(hc container.HostConfig) bool
		wantErr string
	}{
		{
			name:  "zero values leave settings alone",
			start: container.HostConfig{Resources: container.Resources{CPUShares: 512, Memory: 1 << 30, MemorySwap: -1}},
			opts:  UpdateOptions{Resources: container.Resources{PidsLimit: &pids}},
			check: func(hc container.HostConfig) bool {
				return hc.CPUShares == 512 && hc.Memory == 1<<30 && *hc.PidsLimit == 50
			},
		},
		{
			name:    "memory above the set swap needs a swap",
			opts:    UpdateOptions{Resources: container.Resources{Memory: 256 << 20}},
			wantErr: "Memory limit should be smaller than already set memoryswap limit, update the memoryswap at the same time",
		},
		{
			name:  "memory with unlimited swap",
			opts:  UpdateOptions{Resources: container.Resources{Memory: 256 << 20, MemorySwap: -1}},
			check: func(hc container.HostConfig) bool { return hc.Memory == 256<<20 && hc.MemorySwap == -1 },
		},
		{
			name:    "CPUs after a CPU quota",
			start:   container.HostConfig{Resources: container.Resources{CPUQuota: 50000}},
			opts:    UpdateOptions{Resources: container.Resources{NanoCPUs: 1e9}},
			wantErr: "Conflicting options: Nano CPUs cannot be updated as CPU Quota has already been set",
		},
		{
			name:    "restart policy of an auto-removed container",
			start:   container.HostConfig{AutoRemove: true},
			opts:    UpdateOptions{RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyAlways}},
			wantErr: "Restart policy cannot be updated because AutoRemove is enabled for the container",
		},
		{
			name: "restart policy",
			opts: UpdateOptions{RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyOnFailure, MaximumRetryCount: 2}},
			check: func(hc container.HostConfig) bool {
				return hc.RestartPolicy.IsOnFailure() && hc.RestartPolicy.MaximumRetryCount == 2
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hc := tt.start
			err := applyUpdate(&hc, tt.opts)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(hc) {
				t.Errorf("host config after the update: %+v", hc)
			}
		})
	}
}

func TestValidateUpdate(t *testing.T) {
	for _, tt := range []struct {
		opts    UpdateOptions
		wantErr bool
	}{
		{UpdateOptions{Resources: container.Resources{Memory: 4 << 20}}, true},
		{UpdateOptions{Resources: container.Resources{NanoCPUs: 1e6}}, true},
		{UpdateOptions{Resources: container.Resources{NanoCPUs: 1e9}}, false},
		{UpdateOptions{RestartPolicy: container.RestartPolicy{Name: "bogus"}}, true},
		{UpdateOptions{}, false},
	} {
		if err := validateUpdate(tt.opts); (err != nil) != tt.wantErr {
			t.Errorf("validateUpdate(%+v) = %v, want error %v", tt.opts, err, tt.wantErr)
		}
	}
}

// A VM holds its container's --memory and the guest's own overhead.
func TestMemoryMiB(t *testing.T) {
	for _, tt := range []struct {
		memory  int64
		hostMiB int
		want    int
	}{
		{0, 0, 256},
		{6 << 20, 0, minGuestMiB},
		{32 << 20, 0, 32 + 80},
		{128 << 20, 0, 128 + 80 + 2},
		{(128 << 20) + 1, 0, 129 + 80 + 2},
		{1 << 30, 0, 1024 + 80 + 16},
		// Never more than the host has.
		{1 << 30, 24 << 10, 1024 + 80 + 16},
		{100 << 30, 24 << 10, 24 << 10},
		{1<<63 - 1, 24 << 10, 24 << 10},
		{6 << 20, 64, minGuestMiB},
		// The default is the daemon's own choice.
		{0, 128, 256},
	} {
		hc := &container.HostConfig{Resources: container.Resources{Memory: tt.memory}}
		if got := memoryMiB(hc, 256, tt.hostMiB); got != tt.want {
			t.Errorf("memoryMiB(%d, host %d MiB) = %d, want %d", tt.memory, tt.hostMiB, got, tt.want)
		}
	}
}

// The guest's cgroup gets --cpus as runc does, a quota of a 100 ms period,
// and --cpu-quota and --cpu-period as they are.
func TestLimitsOfCPU(t *testing.T) {
	for _, tt := range []struct {
		name               string
		r                  container.Resources
		wantQuota, wantPer int64
	}{
		{"none", container.Resources{}, 0, 0},
		{"half a CPU", container.Resources{NanoCPUs: 5e8}, 50_000, 100_000},
		{"one and a half", container.Resources{NanoCPUs: 15e8}, 150_000, 100_000},
		{"quota", container.Resources{CPUQuota: 25_000}, 25_000, 0},
		{"quota and period", container.Resources{CPUQuota: 30_000, CPUPeriod: 60_000}, 30_000, 60_000},
		{"period alone", container.Resources{CPUPeriod: 60_000}, 0, 0},
		{"unlimited quota", container.Resources{CPUQuota: -1}, 0, 0},
	} {
		l := limitsOf(&container.HostConfig{Resources: tt.r})
		if l.CPUQuota != tt.wantQuota || l.CPUPeriod != tt.wantPer {
			t.Errorf("%s: quota %d period %d, want %d %d", tt.name, l.CPUQuota, l.CPUPeriod, tt.wantQuota, tt.wantPer)
		}
	}
}
