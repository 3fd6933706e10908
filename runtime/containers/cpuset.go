package containers

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"
)

// --cpuset-cpus pins a container's VM: every thread of its VMM (vCPUs,
// I/O) runs on the host CPUs the set names, as runc's cgroup keeps a
// container's processes on them. In the guest, the container's cgroup
// keeps its processes on the vCPUs of the same numbers
// (proto.ContainerSettings.CpusetCPUs), so that what it sees of its CPUs
// (sched_getaffinity, nproc, /proc/self/status) is what runc shows.

// hostCPUs is the set of CPUs huskd may run on: what a cpuset may name.
func hostCPUs() (cpuset.CPUSet, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return cpuset.CPUSet{}, fmt.Errorf("read the daemon's CPUs: %w", err)
	}
	var cpus []int
	for cpu := range len(set) * 64 {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpuset.New(cpus...), nil
}

// validateCpuset checks --cpuset-cpus as dockerd does, in its words.
func validateCpuset(s string) error {
	if s == "" {
		return nil
	}
	want, err := cpuset.Parse(s)
	if err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Invalid value %s for cpuset cpus", s))
	}
	have, err := hostCPUs()
	if err != nil {
		return err
	}
	if !want.IsSubsetOf(have) {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Requested CPUs are not available - requested %s, available: %s", s, have))
	}
	return nil
}

// pinVMM moves every thread of the VMM process pid onto the CPUs s names
// ("" is every CPU the daemon has); threads it starts later inherit the
// mask of the one that starts them.
func pinVMM(pid int, s string) error {
	want, err := hostCPUs()
	if err != nil {
		return err
	}
	if s != "" {
		if want, err = cpuset.Parse(s); err != nil {
			return fmt.Errorf("pin VMM %d: %w", pid, err)
		}
	}
	var mask unix.CPUSet
	for _, cpu := range want.List() {
		mask.Set(cpu)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return fmt.Errorf("pin VMM %d: %w", pid, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &mask); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pin VMM %d thread %d to CPUs %s: %w", pid, tid, want, err)
		}
	}
	return nil
}
