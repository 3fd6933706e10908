package containers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/shim/proto"
)

// The resource flags of docker run that act inside the container are
// carried out by the guest agent: --shm-size, --read-only, --sysctl and
// --init for the container (proto.ContainerSettings), --ulimit and the
// capabilities for every process. The ones that size the VM (--memory,
// --cpus) are in lifecycle.go.

// defaultShmSize is dockerd's /dev/shm size.
const defaultShmSize = 64 << 20

// defaultCapabilities is the bounding set dockerd gives a container
// (moby's oci/caps defaults).
var defaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// namespacedSysctls are the sysctls runc accepts outside net.* and
// fs.mqueue.*: those of the IPC namespace.
var namespacedSysctls = []string{
	"kernel.msgmax", "kernel.msgmnb", "kernel.msgmni", "kernel.sem", "kernel.shmall",
	"kernel.shmmax", "kernel.shmmni", "kernel.shm_rmid_forced",
}

// validateResources refuses at create what dockerd (or runc, at start)
// refuses, in their words, and puts the rest in the form dockerd stores:
// capability names as CAP_X, its defaults filled in (adaptContainerSettings).
func validateResources(hc *container.HostConfig) error {
	if err := validateCpuset(hc.CpusetCpus); err != nil {
		return err
	}
	var err error
	if hc.CapAdd, err = normalizeCapabilities("CapAdd", hc.CapAdd); err != nil {
		return err
	}
	if hc.CapDrop, err = normalizeCapabilities("CapDrop", hc.CapDrop); err != nil {
		return err
	}
	if hc.ShmSize < 0 {
		return errdefs.ErrInvalidArgument.WithMessage("SHM size can not be less than 0")
	}
	if hc.ShmSize == 0 {
		hc.ShmSize = defaultShmSize
	}
	setDefaults(hc)
	for k := range hc.Sysctls {
		if !strings.HasPrefix(k, "net.") && !strings.HasPrefix(k, "fs.mqueue.") && !slices.Contains(namespacedSysctls, k) {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("sysctl %q is not in a separate kernel namespace", k))
		}
	}
	names := proto.RlimitNames()
	for _, u := range hc.Ulimits {
		if u == nil {
			continue
		}
		if !slices.Contains(names, u.Name) {
			return errdefs.ErrInvalidArgument.WithMessage("invalid ulimit type: " + u.Name)
		}
		if u.Soft > u.Hard && u.Hard >= 0 || u.Soft < 0 && u.Hard >= 0 {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("ulimit soft limit must be less than or equal to hard limit: %d > %d", u.Soft, u.Hard))
		}
	}
	if hc.NanoCPUs > 0 && hc.CPUPeriod > 0 {
		return errdefs.ErrInvalidArgument.WithMessage("Conflicting options: Nano CPUs and CPU Period cannot both be set")
	}
	if hc.NanoCPUs > 0 && hc.CPUQuota > 0 {
		return errdefs.ErrInvalidArgument.WithMessage("Conflicting options: Nano CPUs and CPU Quota cannot both be set")
	}
	if err := checkResourceRanges(hc.Resources, false); err != nil {
		return err
	}
	if hc.OomScoreAdj < -1000 || hc.OomScoreAdj > 1000 {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Invalid value %d, range for oom score adj is [-1000, 1000]", hc.OomScoreAdj))
	}
	if hc.PidsLimit != nil && *hc.PidsLimit <= 0 {
		// As dockerd: 0 and any negative value mean no limit.
		hc.PidsLimit = nil
	}
	return nil
}

// setDefaults fills in what dockerd stores for settings a create left
// out, which inspect shows and a later docker update starts from (an
// update of --memory alone is checked against the swap limit). The
// cgroup namespace is "host", as dockerd has it on a cgroup v1 host,
// because that is what a container gets: the agent gives it no cgroup
// namespace, as its group may be made after it starts (docker update).
func setDefaults(hc *container.HostConfig) {
	if hc.Memory > 0 && hc.MemorySwap == 0 {
		hc.MemorySwap = 2 * hc.Memory
	}
	// -1 is the CLI's "not given".
	if hc.MemorySwappiness != nil && *hc.MemorySwappiness == -1 {
		hc.MemorySwappiness = nil
	}
	if hc.IpcMode.IsEmpty() {
		hc.IpcMode = container.IPCModePrivate
	}
	if hc.CgroupnsMode.IsEmpty() {
		hc.CgroupnsMode = container.CgroupnsModeHost
	}
	if hc.OomKillDisable == nil {
		hc.OomKillDisable = new(bool)
	}
	// As dockerd: the defaults unless the client gave lists (the CLI's
	// --security-opt systempaths=unconfined gives empty ones); none for a
	// privileged container.
	if hc.MaskedPaths == nil && !hc.Privileged {
		hc.MaskedPaths = defaultMaskedPaths()
	}
	if hc.ReadonlyPaths == nil && !hc.Privileged {
		hc.ReadonlyPaths = defaultReadonlyPaths()
	}
}

// defaultMaskedPaths are the paths dockerd hides from a container: its
// current list, with the fixes of GHSA-6fw5-f8r9-fgfm and
// GHSA-jq35-85cj-fj4p that 20.10 lacks, but not the per-CPU
// thermal_throttle directories dockerd adds when the host has them: a
// guest's virtual CPUs have none.
func defaultMaskedPaths() []string {
	return []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
		"/proc/timer_stats", "/sys/devices/virtual/powercap", "/sys/firmware",
	}
}

// defaultReadonlyPaths are the paths dockerd makes read-only in a container.
func defaultReadonlyPaths() []string {
	return []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
}

// checkResourceRanges refuses, in dockerd's words and order, limits that
// dockerd refuses whatever the host: at create, and (update) at update,
// where a swap limit may come without a memory limit. (Swappiness and
// blkio weight are left out: dockerd on a host without them, as husk's
// guests are, discards them with a warning before it checks their range.)
func checkResourceRanges(r container.Resources, update bool) error {
	bad := func(msg string) error { return errdefs.ErrInvalidArgument.WithMessage(msg) }
	switch {
	// dockerd's floor; husk's guests get at least minGuestMiB anyway.
	case r.Memory != 0 && r.Memory < minMemory:
		return errMinMemory
	case r.Memory > 0 && r.MemorySwap > 0 && r.MemorySwap < r.Memory:
		return bad("Minimum memoryswap limit should be larger than memory limit, see usage")
	case r.Memory == 0 && r.MemorySwap > 0 && !update:
		return bad("You should always set the Memory limit when using Memoryswap limit, see usage")
	case r.MemoryReservation > 0 && r.MemoryReservation < minMemory:
		return bad("Minimum memory reservation allowed is 6MB")
	case r.Memory > 0 && r.MemoryReservation > 0 && r.Memory < r.MemoryReservation:
		return bad("Minimum memory limit can not be less than memory reservation limit, see usage")
	case r.CPUPeriod != 0 && (r.CPUPeriod < 1000 || r.CPUPeriod > 1000000):
		return bad("CPU cfs period can not be less than 1ms (i.e. 1000) or larger than 1s (i.e. 1000000)")
	case r.CPUQuota > 0 && r.CPUQuota < 1000:
		return bad("CPU cfs quota can not be less than 1ms (i.e. 1000)")
	}
	return nil
}

// createWarnings are the warnings dockerd gives at create for flags that
// do nothing: the guest has no blkio cgroup for the container (no weight,
// no throttling: dockerd on such a host says so for each), and an OOM
// killer disabled without a memory limit protects nothing.
func createWarnings(hc *container.HostConfig) []string {
	warnings := []string{}
	if hc.OomKillDisable != nil && *hc.OomKillDisable && hc.Memory == 0 {
		warnings = append(warnings, "OOM killer is disabled for the container, but no memory limit is set, this can result in the system running out of resources.")
	}
	if hc.BlkioWeight > 0 {
		warnings = append(warnings, "Your kernel does not support Block I/O weight or the cgroup is not mounted. Weight discarded.")
	}
	if len(hc.BlkioWeightDevice) > 0 {
		warnings = append(warnings, "Your kernel does not support Block I/O weight_device or the cgroup is not mounted. Weight-device discarded.")
	}
	if len(hc.BlkioDeviceReadBps) > 0 {
		warnings = append(warnings, "Your kernel does not support BPS Block I/O read limit or the cgroup is not mounted. Block I/O BPS read limit discarded.")
	}
	if len(hc.BlkioDeviceWriteBps) > 0 {
		warnings = append(warnings, "Your kernel does not support BPS Block I/O write limit or the cgroup is not mounted. Block I/O BPS write limit discarded.")
	}
	if len(hc.BlkioDeviceReadIOps) > 0 {
		warnings = append(warnings, "Your kernel does not support IOPS Block read limit or the cgroup is not mounted. Block I/O IOPS read limit discarded.")
	}
	if len(hc.BlkioDeviceWriteIOps) > 0 {
		warnings = append(warnings, "Your kernel does not support IOPS Block write limit or the cgroup is not mounted. Block I/O IOPS write limit discarded.")
	}
	return warnings
}

// normalizeCapabilities writes capability names as dockerd stores them
// ("net_admin" → "CAP_NET_ADMIN", "all" → "ALL") and refuses unknown ones.
func normalizeCapabilities(field string, caps []string) ([]string, error) {
	if caps == nil {
		return nil, nil
	}
	known := proto.CapabilityNames()
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		n := strings.ToUpper(c)
		if n != "ALL" && !strings.HasPrefix(n, "CAP_") {
			n = "CAP_" + n
		}
		if n != "ALL" && !slices.Contains(known, n) {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid %s: unknown capability: %q", field, n))
		}
		out = append(out, n)
	}
	return out, nil
}

// containerCapabilities is the bounding set of the container's processes,
// worked out as moby's TweakCapabilities does: all for a privileged
// container (or exec); else the defaults less CapDrop plus CapAdd, where
// ALL in CapAdd starts from everything and ALL in CapDrop from nothing.
func containerCapabilities(hc *container.HostConfig, privileged bool) *proto.Capabilities {
	all := proto.CapabilityNames()
	switch {
	case privileged || hc.Privileged:
		return &proto.Capabilities{Bounding: all}
	case slices.Contains(hc.CapAdd, "ALL"):
		var caps []string
		for _, c := range all {
			if !slices.Contains(hc.CapDrop, c) {
				caps = append(caps, c)
			}
		}
		return &proto.Capabilities{Bounding: caps}
	case slices.Contains(hc.CapDrop, "ALL"):
		return &proto.Capabilities{Bounding: append([]string{}, hc.CapAdd...)}
	}
	var caps []string
	for _, c := range defaultCapabilities {
		if !slices.Contains(hc.CapDrop, c) {
			caps = append(caps, c)
		}
	}
	for _, c := range hc.CapAdd {
		if !slices.Contains(caps, c) {
			caps = append(caps, c)
		}
	}
	return &proto.Capabilities{Bounding: caps}
}

// containerRlimits are the container's --ulimit settings, for every one of
// its processes.
func containerRlimits(hc *container.HostConfig) []proto.Rlimit {
	var out []proto.Rlimit
	for _, u := range hc.Ulimits {
		if u != nil {
			out = append(out, proto.Rlimit{Type: u.Name, Soft: u.Soft, Hard: u.Hard})
		}
	}
	return out
}

// containerSettings are the container-wide settings the agent applies.
func containerSettings(hc *container.HostConfig) *proto.ContainerSettings {
	limits := limitsOf(hc)
	return &proto.ContainerSettings{
		ShmSize:     hc.ShmSize,
		ReadOnly:    hc.ReadonlyRootfs,
		Sysctls:     hc.Sysctls,
		Init:        hc.Init != nil && *hc.Init,
		PidsLimit:   limits.PidsLimit,
		MemoryLimit: limits.MemoryLimit,
		CPUQuota:    limits.CPUQuota,
		CPUPeriod:   limits.CPUPeriod,
		CpusetCPUs:  limits.CpusetCPUs,
		OomScoreAdj: hc.OomScoreAdj,
		// A privileged container, whatever its stored lists (an API
		// client may send both), gets neither, as under dockerd.
		MaskedPaths:   unlessPrivileged(hc, hc.MaskedPaths),
		ReadonlyPaths: unlessPrivileged(hc, hc.ReadonlyPaths),
		Privileged:    hc.Privileged,
	}
}

func unlessPrivileged(hc *container.HostConfig, paths []string) []string {
	if hc.Privileged {
		return nil
	}
	return paths
}

// parseSecurityOpt reads --security-opt as dockerd's parseSecurityOpt
// does, and words what it refuses as it does. Only no-new-privileges
// changes anything here: the labels, AppArmor and seccomp profiles it
// names are the host's confinement of a container process, and a
// container's processes run in a VM of their own instead.
func parseSecurityOpt(opts []string) (noNewPrivileges bool, _ error) {
	for _, opt := range opts {
		if opt == "no-new-privileges" {
			noNewPrivileges = true
			continue
		}
		if opt == "disable" {
			continue
		}
		key, value, ok := strings.Cut(opt, "=")
		if !ok {
			key, value, ok = strings.Cut(opt, ":")
		}
		if !ok {
			return false, fmt.Errorf("invalid --security-opt 1: %q", opt)
		}
		switch key {
		case "label", "apparmor", "seccomp":
		case "no-new-privileges":
			v, err := strconv.ParseBool(value)
			if err != nil {
				return false, fmt.Errorf("invalid --security-opt 2: %q", opt)
			}
			noNewPrivileges = v
		default:
			return false, fmt.Errorf("invalid --security-opt 2: %q", opt)
		}
	}
	return noNewPrivileges, nil
}

// noNewPrivileges says whether the container's processes run with
// no_new_privs; create refused options parseSecurityOpt does not take.
func noNewPrivileges(hc *container.HostConfig) bool {
	v, _ := parseSecurityOpt(hc.SecurityOpt)
	return v
}

// refuseSharedNamespaces refuses the namespace modes a VM cannot give:
// another container's or the host's PID, IPC or UTS namespace is in
// another kernel. As with --network host and container:<name>, a clear
// refusal rather than a container that silently sees only its own VM
// (a debugging sidecar with --pid container:app would find no app).
func refuseSharedNamespaces(hc *container.HostConfig) error {
	// Modes dockerd does not know at all are refused first, in its
	// words (those of 23 and later; 20.10 capitalises them).
	switch {
	case !hc.IpcMode.Valid():
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid IPC mode: %v", hc.IpcMode))
	case !hc.PidMode.Valid():
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid PID mode: %v", hc.PidMode))
	case !hc.UTSMode.Valid():
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid UTS mode: %v", hc.UTSMode))
	case !hc.Isolation.IsDefault():
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid isolation (%s): linux only supports 'default'", hc.Isolation))
	}
	for _, ns := range []struct {
		flag            string
		host, container bool
	}{
		{"--pid", hc.PidMode.IsHost(), hc.PidMode.IsContainer()},
		{"--ipc", hc.IpcMode.IsHost(), hc.IpcMode.IsContainer()},
		{"--uts", hc.UTSMode.IsHost(), false},
	} {
		switch {
		case ns.host:
			return errdefs.ErrInvalidArgument.WithMessage("husk does not support " + ns.flag + " host: every container is a VM with its own kernel")
		case ns.container:
			return errdefs.ErrInvalidArgument.WithMessage("husk does not support " + ns.flag + " container:<name>: every container is a VM with its own kernel")
		}
	}
	return nil
}
