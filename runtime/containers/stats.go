package containers

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/shim/proto"
)

// statsTimeout bounds one sample: a guest that cannot answer in this time
// is not going to.
const statsTimeout = 10 * time.Second

// Stats samples a running container's resource usage from inside its
// guest: the VM is the container, so the guest kernel's totals are its
// usage, and the CLI's CPU percentage (usage delta over system delta,
// times online CPUs) comes out as a share of the guest's vCPUs. Memory's
// limit is the VM's memory size (--memory, else the daemon's default).
//
// The response always names the container. A container that is not
// running gives errdefs.ErrConflict; a paused one errdefs.ErrUnavailable
// (its guest cannot answer, and its counters do not move).
func (m *Manager) Stats(ctx context.Context, ref string) (container.StatsResponse, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return container.StatsResponse{}, err
	}
	c.mu.Lock()
	resp := container.StatsResponse{ID: c.rec.ID, Name: "/" + c.rec.Name}
	r := c.run
	running, paused := c.rec.State.Running, c.rec.State.Paused
	// As under runc, the limit is --memory (the container's cgroup's);
	// without one it is all the memory there is, the VM's.
	limit := uint64(m.guest.MemoryMiB) << 20
	if c.rec.HostConfig != nil && c.rec.HostConfig.Memory > 0 {
		limit = uint64(c.rec.HostConfig.Memory)
	}
	c.mu.Unlock()
	switch {
	case r == nil || !running:
		return resp, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is not running", resp.ID))
	case paused:
		return resp, errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("Container %s is paused", resp.ID))
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	st, err := r.proc.Stats(ctx)
	if err != nil {
		return resp, fmt.Errorf("sample stats of %s: %w", resp.ID[:12], err)
	}
	fillStats(&resp, st, limit, time.Now().UTC())
	return resp, nil
}

// fillStats turns a guest sample into dockerd's cgroup v2 shape.
func fillStats(resp *container.StatsResponse, st *proto.GuestStats, memLimit uint64, now time.Time) {
	resp.Read = now
	resp.CPUStats = container.CPUStats{
		CPUUsage: container.CPUUsage{
			TotalUsage: st.CPUUser + st.CPUSystem, PercpuUsage: st.PerCPU,
			UsageInUsermode: st.CPUUser, UsageInKernelmode: st.CPUSystem,
		},
		SystemUsage: st.CPUTotal, OnlineCPUs: uint32(st.OnlineCPUs),
	}
	if cs := st.CgroupCPUStat; cs != nil {
		if _, ok := cs["nr_periods"]; ok {
			resp.CPUStats.ThrottlingData = container.ThrottlingData{
				Periods: cs["nr_periods"], ThrottledPeriods: cs["nr_throttled"], ThrottledTime: cs["throttled_usec"] * 1000,
			}
		}
	}
	mem := st.Memory
	// Usage counts the page cache, as a cgroup's does; the CLI takes
	// inactive_file back out.
	var usage uint64
	if mem["MemTotal"] > mem["MemFree"] {
		usage = mem["MemTotal"] - mem["MemFree"]
	}
	resp.MemoryStats = container.MemoryStats{
		Usage: usage, Limit: memLimit,
		Stats: map[string]uint64{
			"anon": mem["AnonPages"], "file": mem["Cached"] + mem["Buffers"],
			"active_file": mem["Active(file)"], "inactive_file": mem["Inactive(file)"],
			"active_anon": mem["Active(anon)"], "inactive_anon": mem["Inactive(anon)"],
			"shmem": mem["Shmem"], "slab": mem["Slab"], "kernel_stack": mem["KernelStack"],
		},
	}
	// A container with a cgroup of its own in the guest is measured by
	// it, as runc's are: the guest's kernel and agent are not its usage.
	if st.CgroupMemoryStat != nil {
		resp.MemoryStats.Usage, resp.MemoryStats.Stats = st.CgroupMemory, st.CgroupMemoryStat
	}
	if len(st.Networks) > 0 {
		resp.Networks = map[string]container.NetworkStats{}
		for _, n := range st.Networks {
			resp.Networks[n.Name] = container.NetworkStats{
				RxBytes: n.RxBytes, RxPackets: n.RxPackets, RxErrors: n.RxErrors, RxDropped: n.RxDropped,
				TxBytes: n.TxBytes, TxPackets: n.TxPackets, TxErrors: n.TxErrors, TxDropped: n.TxDropped,
			}
		}
	}
	disks := append([]proto.DiskStats(nil), st.Disks...)
	sort.Slice(disks, func(i, j int) bool { return disks[i].Name < disks[j].Name })
	var bytes, ops []container.BlkioStatEntry
	for _, d := range disks {
		bytes = append(bytes,
			container.BlkioStatEntry{Major: d.Major, Minor: d.Minor, Op: "read", Value: d.ReadBytes},
			container.BlkioStatEntry{Major: d.Major, Minor: d.Minor, Op: "write", Value: d.WriteBytes})
		ops = append(ops,
			container.BlkioStatEntry{Major: d.Major, Minor: d.Minor, Op: "read", Value: d.ReadOps},
			container.BlkioStatEntry{Major: d.Major, Minor: d.Minor, Op: "write", Value: d.WriteOps})
	}
	resp.BlkioStats = container.BlkioStats{IoServiceBytesRecursive: bytes, IoServicedRecursive: ops}
	resp.PidsStats = container.PidsStats{Current: st.Pids}
}
