//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// GuestCgroups keeps the container's processes in one cgroup v2 group of
// the guest, where --pids-limit is its pids.max. The guest is the
// container's alone, so a single group under the root does; dockerd's
// other cgroup limits size the VM instead. The group is made at every
// setup, limit or not, so that docker update can set one later.
type GuestCgroups struct {
	// Dir is where cgroup2 is mounted; default /run/husk/cgroup.
	Dir string
}

func (g GuestCgroups) dir() string {
	if g.Dir == "" {
		return "/run/husk/cgroup"
	}
	return g.Dir
}

func (g GuestCgroups) group() string { return filepath.Join(g.dir(), "container") }

// Create mounts cgroup2 (once per boot), enables the pids controller and
// makes the container's group.
func (g GuestCgroups) Create(limit int64) (string, error) {
	dir := g.dir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		if err := unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return "", fmt.Errorf("mount cgroup2: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
		return "", fmt.Errorf("enable the pids controller: %w", err)
	}
	if err := os.Mkdir(g.group(), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	if err := g.SetPidsLimit(limit); err != nil {
		return "", err
	}
	return g.group(), nil
}

// SetPidsLimit writes pids.max.
func (g GuestCgroups) SetPidsLimit(limit int64) error {
	v := "max"
	if limit > 0 {
		v = strconv.FormatInt(limit, 10)
	}
	if err := os.WriteFile(filepath.Join(g.group(), "pids.max"), []byte(v), 0); err != nil {
		return fmt.Errorf("set pids limit: %w", err)
	}
	return nil
}

// createCgroup makes the container's cgroup where the agent can; without
// one a pids limit cannot be kept, and is refused.
func (a *Agent) createCgroup(limit int64) (string, error) {
	if a.opts.Cgroups == nil {
		if limit > 0 {
			return "", &agentError{proto.KindInvalid, "setup: this agent keeps no cgroups: a pids limit cannot be applied"}
		}
		return "", nil
	}
	procs, err := a.opts.Cgroups.Create(limit)
	if err != nil {
		if limit > 0 {
			return "", fmt.Errorf("setup: %w", err)
		}
		// Without a limit the group only helps a later docker update.
		a.log.Warn("no cgroup for the container", "err", err)
		return "", nil
	}
	return procs, nil
}

// setLimits applies OpLimits to the running container.
func (a *Agent) setLimits(spec *proto.LimitsSpec) error {
	if spec == nil {
		return &agentError{proto.KindInvalid, "limits: missing limits"}
	}
	a.mu.Lock()
	dir := a.cgroupDir
	a.mu.Unlock()
	if dir == "" || a.opts.Cgroups == nil {
		return &agentError{proto.KindInvalid, "limits: the container has no cgroup"}
	}
	return a.opts.Cgroups.SetPidsLimit(spec.PidsLimit)
}

// cgroupFdEnv hands --init's init the container's cgroup (a descriptor
// number): it starts its child there and drops the variable.
const cgroupFdEnv = "HUSK_CGROUP_FD"

// openCgroupProcs opens cgroup.procs of the cgroup directory at dirFd and
// closes dirFd. The init calls it while still root: a write's permission
// is checked against the opener's credentials.
func openCgroupProcs(dirFd int) (int, error) {
	defer unix.Close(dirFd)
	fd, err := unix.Openat(dirFd, "cgroup.procs", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open the container's cgroup: %w", err)
	}
	return fd, nil
}

// joinCgroup moves the calling process, the container's init about to
// exec, into the cgroup whose cgroup.procs is open at fd.
func joinCgroup(fd int) error {
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("0")); err != nil {
		return fmt.Errorf("join the container's cgroup: %w", err)
	}
	return nil
}
