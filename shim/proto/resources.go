package proto

import "strings"

// ContainerSettings are the container-wide parts of docker run's resource
// flags. The agent applies Sysctls on OpSetup, before any process starts,
// and the rest when it prepares the main process's root.
type ContainerSettings struct {
	// ShmSize is /dev/shm's size in bytes (--shm-size); 0 means 64 MiB.
	ShmSize int64 `json:"shmSize,omitempty"`
	// ReadOnly mounts the container's root filesystem, and the /etc files
	// the agent binds into it, read-only (--read-only); /dev, /dev/shm,
	// /proc and volumes and tmpfs mounts stay writable.
	ReadOnly bool `json:"readOnly,omitempty"`
	// Sysctls are written under /proc/sys ("net.ipv4.ip_forward" →
	// /proc/sys/net/ipv4/ip_forward). The guest is the container, so its
	// namespaced and global settings alike are the container's own.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Init runs the main process under a minimal init as PID 1 (--init),
	// which forwards signals to it and reaps orphans.
	Init bool `json:"init,omitempty"`
	// Devices are the --device nodes the agent makes in the container's
	// /dev. A node names the guest kernel's device of that number: a VM
	// gets no host hardware, so only devices the guest kernel drives
	// itself (null, zero, random, tty, ...) can be given.
	Devices []Device `json:"devices,omitempty"`
	// PidsLimit caps the number of the container's tasks (--pids-limit):
	// the main process, its descendants and every exec share one cgroup
	// whose pids.max it is. 0 is no limit.
	PidsLimit int64 `json:"pidsLimit,omitempty"`
	// MemoryLimit is --memory in bytes: the memory.max of the same
	// cgroup. The VM's RAM is sized from it too, but the guest's kernel
	// and agent live in that RAM and it has a floor, so the group is what
	// holds the container to the limit, and what an OOM kill is counted
	// against, as under runc. 0 is no limit.
	MemoryLimit int64 `json:"memoryLimit,omitempty"`
	// CPUQuota and CPUPeriod are the same cgroup's cpu.max, in
	// microseconds: --cpus (as a quota of a 100 ms period, as runc sets
	// it) or --cpu-quota and --cpu-period. The VM has --cpus rounded up
	// as its vCPUs, so the group is what holds a fraction of one to its
	// share. A CPUQuota of 0 is no limit; a CPUPeriod of 0 is 100 ms.
	CPUQuota  int64 `json:"cpuQuota,omitempty"`
	CPUPeriod int64 `json:"cpuPeriod,omitempty"`
	// CpusetCPUs (--cpuset-cpus, "0-1,3") is the same cgroup's
	// cpuset.cpus: the guest CPUs of those numbers its processes may run
	// on, as runc's cpuset keeps them on the host's (the host pins the
	// VM to the host's). Numbers the guest has no vCPU for are left out;
	// a guest kernel without the cpuset controller keeps no such set.
	CpusetCPUs string `json:"cpusetCpus,omitempty"`
	// Domainname is the container's NIS domain name (--domainname), set
	// in its UTS namespace beside its hostname.
	Domainname string `json:"domainname,omitempty"`
	// OomScoreAdj is the oom_score_adj of the main process and every exec
	// (--oom-score-adj).
	OomScoreAdj int `json:"oomScoreAdj,omitempty"`
	// MaskedPaths are hidden in the container: a file behind /dev/null,
	// a directory behind an empty read-only tmpfs. ReadonlyPaths are
	// made read-only. Paths missing in the guest are skipped; both are
	// absolute, in the container's root, as in runc's spec.
	MaskedPaths   []string `json:"maskedPaths,omitempty"`
	ReadonlyPaths []string `json:"readonlyPaths,omitempty"`
	// Privileged (--privileged) mounts /sys and /sys/fs/cgroup read-write
	// and gives the container's /dev a node for every device of the
	// guest, as runc gives a privileged container the host's. Devices
	// still wins for a path both name.
	Privileged bool `json:"privileged,omitempty"`
}

// OpLimits changes the limits of a running container (docker update):
// Request.Limits. Nothing follows on the stream.
const OpLimits Op = "limits"

// LimitsSpec is OpLimits' argument: the limits the container is to have
// from now on, each 0 for none.
type LimitsSpec struct {
	// PidsLimit is the new ContainerSettings.PidsLimit.
	PidsLimit int64 `json:"pidsLimit"`
	// MemoryLimit is the new ContainerSettings.MemoryLimit.
	MemoryLimit int64 `json:"memoryLimit"`
	// CPUQuota and CPUPeriod are the new ContainerSettings.CPUQuota and
	// CPUPeriod.
	CPUQuota  int64 `json:"cpuQuota"`
	CPUPeriod int64 `json:"cpuPeriod"`
	// CpusetCPUs is the new ContainerSettings.CpusetCPUs.
	CpusetCPUs string `json:"cpusetCpus,omitempty"`
}

// Limits are the limits s sets, as OpLimits would give them.
func (s *ContainerSettings) Limits() LimitsSpec {
	if s == nil {
		return LimitsSpec{}
	}
	return LimitsSpec{PidsLimit: s.PidsLimit, MemoryLimit: s.MemoryLimit, CPUQuota: s.CPUQuota, CPUPeriod: s.CPUPeriod, CpusetCPUs: s.CpusetCPUs}
}

// None says l limits nothing, so that the container needs no cgroup for
// it.
func (l LimitsSpec) None() bool {
	return l.PidsLimit <= 0 && l.MemoryLimit <= 0 && l.CPUQuota <= 0 && l.CpusetCPUs == ""
}

// Device is one device node: where it goes in the container, its
// numbers, and the permission bits and owner of the host's node. It is a
// character device unless Block says otherwise.
type Device struct {
	Block bool   `json:"block,omitempty"`
	Path  string `json:"path"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
	Mode  uint32 `json:"mode"`
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
}

// Rlimit is one --ulimit: Type is Docker's name ("nofile", "nproc", ...,
// see RlimitNames).
type Rlimit struct {
	Type string `json:"type"`
	Soft int64  `json:"soft"`
	Hard int64  `json:"hard"`
}

// Capabilities is a process's capability bounding set, by name
// ("CAP_CHOWN"). As under runc, a root process gets the whole set as
// permitted and effective capabilities, any other user none.
type Capabilities struct {
	Bounding []string `json:"bounding"`
}

// rlimitNames are Docker's --ulimit names.
const rlimitNames = "as core cpu data fsize locks memlock msgqueue nice nofile nproc rss rtprio rttime sigpending stack"

// RlimitNames lists the names a Rlimit's Type may have.
func RlimitNames() []string { return strings.Fields(rlimitNames) }

// capabilityNames are the capabilities of Linux 6.1 in number order.
const capabilityNames = "CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_FSETID CAP_KILL " +
	"CAP_SETGID CAP_SETUID CAP_SETPCAP CAP_LINUX_IMMUTABLE CAP_NET_BIND_SERVICE CAP_NET_BROADCAST " +
	"CAP_NET_ADMIN CAP_NET_RAW CAP_IPC_LOCK CAP_IPC_OWNER CAP_SYS_MODULE CAP_SYS_RAWIO CAP_SYS_CHROOT " +
	"CAP_SYS_PTRACE CAP_SYS_PACCT CAP_SYS_ADMIN CAP_SYS_BOOT CAP_SYS_NICE CAP_SYS_RESOURCE CAP_SYS_TIME " +
	"CAP_SYS_TTY_CONFIG CAP_MKNOD CAP_LEASE CAP_AUDIT_WRITE CAP_AUDIT_CONTROL CAP_SETFCAP CAP_MAC_OVERRIDE " +
	"CAP_MAC_ADMIN CAP_SYSLOG CAP_WAKE_ALARM CAP_BLOCK_SUSPEND CAP_AUDIT_READ CAP_PERFMON CAP_BPF " +
	"CAP_CHECKPOINT_RESTORE"

// CapabilityNames lists every capability name; a name's index is its
// number.
func CapabilityNames() []string { return strings.Fields(capabilityNames) }
