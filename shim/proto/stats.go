package proto

// OpStats samples the guest's resource usage for docker stats: one
// Response with Stats set. ID names the container's main process, whose
// PID namespace Pids counts.
const OpStats Op = "stats"

// GuestStats is one sample of the guest's counters, cumulative since boot.
// CPU times are nanoseconds; sizes are bytes.
type GuestStats struct {
	// CPUUser and CPUSystem are the guest's time in user and kernel mode
	// (nice counts as user; irq and softirq as system).
	CPUUser   uint64 `json:"cpuUser"`
	CPUSystem uint64 `json:"cpuSystem"`
	// CPUTotal is all the guest's CPU time, idle included.
	CPUTotal uint64 `json:"cpuTotal"`
	// PerCPU is each CPU's busy time.
	PerCPU     []uint64 `json:"perCPU,omitempty"`
	OnlineCPUs int      `json:"onlineCPUs"`

	// Memory is /proc/meminfo, in bytes, by field name ("MemTotal",
	// "MemAvailable", "Inactive(file)", …).
	Memory map[string]uint64 `json:"memory"`
	// CgroupMemory is the container's cgroup's memory.current, and
	// CgroupMemoryStat its memory.stat, when the container has had a
	// cgroup since it was set up (a --memory, --pids-limit or --cpus):
	// then they, not the guest's, are the container's usage, as under
	// runc. A group made later (docker pause, docker update) was not
	// charged for what the container already used, so it is left out.
	CgroupMemory     uint64            `json:"cgroupMemory,omitempty"`
	CgroupMemoryStat map[string]uint64 `json:"cgroupMemoryStat,omitempty"`
	// CgroupCPUStat is the same group's cpu.stat: with the cpu
	// controller (a --cpus or --cpu-quota), nr_periods, nr_throttled and
	// throttled_usec say how often its quota held it back.
	CgroupCPUStat map[string]uint64 `json:"cgroupCPUStat,omitempty"`

	Networks []NetDevStats `json:"networks,omitempty"`
	Disks    []DiskStats   `json:"disks,omitempty"`
	// Pids counts the tasks (threads included) in the PID namespace.
	Pids uint64 `json:"pids"`
}

// NetDevStats is one interface's line of /proc/net/dev.
type NetDevStats struct {
	Name      string `json:"name"`
	RxBytes   uint64 `json:"rxBytes"`
	RxPackets uint64 `json:"rxPackets"`
	RxErrors  uint64 `json:"rxErrors"`
	RxDropped uint64 `json:"rxDropped"`
	TxBytes   uint64 `json:"txBytes"`
	TxPackets uint64 `json:"txPackets"`
	TxErrors  uint64 `json:"txErrors"`
	TxDropped uint64 `json:"txDropped"`
}

// DiskStats is one block device's /sys/block/*/stat.
type DiskStats struct {
	Name       string `json:"name"`
	Major      uint64 `json:"major"`
	Minor      uint64 `json:"minor"`
	ReadOps    uint64 `json:"readOps"`
	ReadBytes  uint64 `json:"readBytes"`
	WriteOps   uint64 `json:"writeOps"`
	WriteBytes uint64 `json:"writeBytes"`
}
