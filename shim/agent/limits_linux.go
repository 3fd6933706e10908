//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// applySysctls writes the container's --sysctl settings. The guest is the
// container, so every setting is the container's own; a name the guest
// kernel does not have fails the setup, in runc's words.
func applySysctls(procSys string, sysctls map[string]string) error {
	keys := make([]string, 0, len(sysctls))
	for k := range sysctls {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		path := filepath.Join(procSys, strings.ReplaceAll(k, ".", "/"))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return &agentError{proto.KindInvalid, fmt.Sprintf("sysctl %s: %v", k, err)}
		}
		_, err = f.WriteString(sysctls[k])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return &agentError{proto.KindInvalid, fmt.Sprintf("sysctl %s=%s: %v", k, sysctls[k], err)}
		}
	}
	return nil
}

// containerRlimits sets, at boot, the limits every process of the guest
// inherits to those dockerd's containers get from the daemon's systemd
// units: 1024 open files, up to 524288 (systemd's default since v240,
// which Docker Engine 25 and containerd 2.0 keep), and processes
// unlimited (LimitNPROC=infinity). The kernel's own defaults, 1024:4096
// files and a process count sized by the guest's small memory (a few
// hundred), stop programs that run under Docker: one raising its
// descriptors to the hard limit (as a JVM does), a non-root user's many
// threads. --ulimit still sets a container's own.
func containerRlimits() error {
	for _, l := range []struct {
		resource int
		limit    unix.Rlimit
	}{
		{unix.RLIMIT_NOFILE, unix.Rlimit{Cur: 1024, Max: 524288}},
		{unix.RLIMIT_NPROC, unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}},
	} {
		if err := unix.Setrlimit(l.resource, &l.limit); err != nil {
			return fmt.Errorf("setrlimit %d: %w", l.resource, err)
		}
	}
	return nil
}

// rlimitResource maps Docker's --ulimit names to setrlimit resources.
func rlimitResource(name string) (int, bool) {
	switch name {
	case "as":
		return unix.RLIMIT_AS, true
	case "core":
		return unix.RLIMIT_CORE, true
	case "cpu":
		return unix.RLIMIT_CPU, true
	case "data":
		return unix.RLIMIT_DATA, true
	case "fsize":
		return unix.RLIMIT_FSIZE, true
	case "locks":
		return unix.RLIMIT_LOCKS, true
	case "memlock":
		return unix.RLIMIT_MEMLOCK, true
	case "msgqueue":
		return unix.RLIMIT_MSGQUEUE, true
	case "nice":
		return unix.RLIMIT_NICE, true
	case "nofile":
		return unix.RLIMIT_NOFILE, true
	case "nproc":
		return unix.RLIMIT_NPROC, true
	case "rss":
		return unix.RLIMIT_RSS, true
	case "rtprio":
		return unix.RLIMIT_RTPRIO, true
	case "rttime":
		return unix.RLIMIT_RTTIME, true
	case "sigpending":
		return unix.RLIMIT_SIGPENDING, true
	case "stack":
		return unix.RLIMIT_STACK, true
	}
	return 0, false
}

// rlimitValue reads Docker's -1 as unlimited.
func rlimitValue(v int64) uint64 {
	if v < 0 {
		return unix.RLIM_INFINITY
	}
	return uint64(v)
}

// rlimitOf is Docker's --ulimit l as setrlimit takes it: the resource and
// the limit, or the error of an unknown type.
func rlimitOf(l proto.Rlimit) (int, unix.Rlimit, error) {
	res, ok := rlimitResource(l.Type)
	if !ok {
		return 0, unix.Rlimit{}, &agentError{proto.KindInvalid, fmt.Sprintf("invalid ulimit type: %s", l.Type)}
	}
	return res, unix.Rlimit{Cur: rlimitValue(l.Soft), Max: rlimitValue(l.Hard)}, nil
}

// setrlimitError is the failure of setrlimit for l.
func setrlimitError(l proto.Rlimit, err error) error {
	return fmt.Errorf("setrlimit %s %d:%d: %w", l.Type, l.Soft, l.Hard, err)
}

// boundCapabilities drops from the bounding set every capability caps does
// not name, up to last (the kernel's last capability, lastCapability).
// That is all it takes to give the program runc's sets: execve makes a
// root process's permitted and effective sets its bounding set, and
// leaves any other user's empty.
func boundCapabilities(caps *proto.Capabilities, last int) error {
	drop, err := capabilitiesToDrop(caps, last)
	if err != nil {
		return err
	}
	for _, c := range drop {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// capabilitiesToDrop are the capabilities up to last that caps does not
// name; nil caps keeps them all.
func capabilitiesToDrop(caps *proto.Capabilities, last int) ([]int, error) {
	if caps == nil {
		return nil, nil
	}
	names := proto.CapabilityNames()
	keep := map[int]bool{}
	for _, n := range caps.Bounding {
		i := slices.Index(names, n)
		if i < 0 {
			return nil, &agentError{proto.KindInvalid, fmt.Sprintf("unknown capability %q", n)}
		}
		keep[i] = true
	}
	var drop []int
	for c := 0; c <= last; c++ {
		if !keep[c] {
			drop = append(drop, c)
		}
	}
	return drop, nil
}

// lastCapability is the kernel's last capability, from procSys
// (/proc/sys), or the last of proto's table where the kernel does not say.
// A newer guest kernel may know more capabilities than the table; those
// are dropped too. The agent reads it once, rather than every process
// start reading the same value again.
func lastCapability(procSys string) int {
	if b, err := os.ReadFile(filepath.Join(procSys, "kernel/cap_last_cap")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return len(proto.CapabilityNames()) - 1
}

// shmData is /dev/shm's mount data for --shm-size (64 MiB by default).
func shmData(size int64) string {
	if size <= 0 {
		size = 64 << 20
	}
	return "mode=1777,size=" + strconv.FormatInt(size, 10)
}
