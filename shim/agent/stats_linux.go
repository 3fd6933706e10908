//go:build linux

package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/husk-vm/husk/shim/proto"
)

// tickNanos converts USER_HZ ticks (/proc/stat) to nanoseconds.
const tickNanos = 1_000_000_000 / clockTicks

// sectorBytes is the unit of /sys/block/*/stat, whatever the device's
// block size.
const sectorBytes = 512

// stats samples the guest's counters. The whole VM is the container, so
// the guest's totals are the container's; only the task count is limited
// to p's PID namespace, which leaves out the agent.
func (a *Agent) stats(p *process) (*proto.GuestStats, error) {
	st := &proto.GuestStats{}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := parseProcStat(string(b), st); err != nil {
		return nil, err
	}
	if b, err = os.ReadFile("/proc/meminfo"); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.Memory = parseMeminfo(string(b))
	if b, err = os.ReadFile("/proc/net/dev"); err == nil {
		st.Networks = parseNetDev(string(b))
	}
	st.Disks = readDisks("/sys/block")
	a.mu.Lock()
	cgroupDir, late := a.cgroupDir, a.cgroupLate
	a.mu.Unlock()
	if cgroupDir != "" {
		if !late {
			st.CgroupMemory, st.CgroupMemoryStat = readCgroupMemory(cgroupDir)
		}
		st.CgroupCPUStat, _ = readFlatKeyed(filepath.Join(cgroupDir, "cpu.stat"))
	}
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p.pid)); err == nil {
		st.Pids = countTasks(ns)
	}
	return st, nil
}

// parseProcStat reads the "cpu" and "cpuN" lines of /proc/stat: user nice
// system idle iowait irq softirq steal (guest time is already in user).
func parseProcStat(s string, st *proto.GuestStats) error {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		var v [8]uint64
		for i := 1; i < len(f) && i <= len(v); i++ {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return fmt.Errorf("stats: /proc/stat line %q: %w", line, err)
			}
			v[i-1] = n * tickNanos
		}
		user := v[0] + v[1]
		system := v[2] + v[5] + v[6] + v[7]
		if f[0] == "cpu" {
			st.CPUUser, st.CPUSystem = user, system
			st.CPUTotal = user + system + v[3] + v[4]
			continue
		}
		st.PerCPU = append(st.PerCPU, user+system)
	}
	st.OnlineCPUs = len(st.PerCPU)
	if st.CPUTotal == 0 {
		return fmt.Errorf("stats: no cpu line in /proc/stat")
	}
	return nil
}

// parseMeminfo reads /proc/meminfo into bytes by field name.
func parseMeminfo(s string) map[string]uint64 {
	out := map[string]uint64{}
	for _, line := range strings.Split(s, "\n") {
		k, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		out[k] = n
	}
	return out
}

// parseNetDev reads /proc/net/dev, leaving out loopback as dockerd does.
func parseNetDev(s string) []proto.NetDevStats {
	var out []proto.NetDevStats
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "lo" || strings.Contains(name, "|") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			continue
		}
		var v [16]uint64
		for i := range v {
			v[i], _ = strconv.ParseUint(f[i], 10, 64)
		}
		out = append(out, proto.NetDevStats{
			Name: name, RxBytes: v[0], RxPackets: v[1], RxErrors: v[2], RxDropped: v[3],
			TxBytes: v[8], TxPackets: v[9], TxErrors: v[10], TxDropped: v[11],
		})
	}
	return out
}

// readDisks reads each real block device's counters under dir.
func readDisks(dir string) []proto.DiskStats {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []proto.DiskStats
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "loop") || strings.HasPrefix(name, "ram") {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, name, "stat"))
		if err != nil {
			continue
		}
		dev, err := os.ReadFile(filepath.Join(dir, name, "dev"))
		if err != nil {
			continue
		}
		if d, ok := parseDisk(name, string(dev), string(stat)); ok {
			out = append(out, d)
		}
	}
	return out
}

// parseDisk reads a device's "major:minor" and its stat line: reads,
// merged reads, sectors read, read ticks, writes, merged writes, sectors
// written, ...
func parseDisk(name, dev, stat string) (proto.DiskStats, bool) {
	maj, min, ok := strings.Cut(strings.TrimSpace(dev), ":")
	if !ok {
		return proto.DiskStats{}, false
	}
	d := proto.DiskStats{Name: name}
	var err error
	if d.Major, err = strconv.ParseUint(maj, 10, 64); err != nil {
		return proto.DiskStats{}, false
	}
	if d.Minor, err = strconv.ParseUint(min, 10, 64); err != nil {
		return proto.DiskStats{}, false
	}
	f := strings.Fields(stat)
	if len(f) < 7 {
		return proto.DiskStats{}, false
	}
	var v [7]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
			return proto.DiskStats{}, false
		}
	}
	d.ReadOps, d.ReadBytes = v[0], v[2]*sectorBytes
	d.WriteOps, d.WriteBytes = v[4], v[6]*sectorBytes
	return d, true
}

// countTasks counts the threads of every process in the PID namespace ns.
func countTasks(ns string) uint64 {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var n uint64
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc", d.Name(), "ns/pid")); err != nil || l != ns {
			continue
		}
		tasks, err := os.ReadDir(filepath.Join("/proc", d.Name(), "task"))
		if err != nil {
			continue
		}
		n += uint64(len(tasks))
	}
	return n
}

// oomKills is the guest kernel's count of OOM kills so far (0 if it cannot
// be read).
func oomKills() uint64 {
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return 0
	}
	return parseOOMKills(string(b))
}

// parseOOMKills reads /proc/vmstat's oom_kill line.
func parseOOMKills(vmstat string) uint64 {
	for _, line := range strings.Split(vmstat, "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// readCgroupMemory reads a cgroup's memory.current and memory.stat; a
// group without the memory controller gives 0 and nil.
func readCgroupMemory(dir string) (uint64, map[string]uint64) {
	b, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, nil
	}
	current, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, nil
	}
	stat, _ := readFlatKeyed(filepath.Join(dir, "memory.stat"))
	if stat == nil {
		stat = map[string]uint64{}
	}
	return current, stat
}

// readFlatKeyed reads a cgroup file of "key value" lines (memory.stat,
// cpu.stat).
func readFlatKeyed(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if n, err := strconv.ParseUint(v, 10, 64); ok && err == nil {
			out[k] = n
		}
	}
	return out, nil
}
