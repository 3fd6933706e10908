//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"

	"github.com/husk-vm/husk/shim/proto"
)

// GuestCgroups keeps the container's processes in one cgroup v2 group of
// the guest, where --pids-limit is its pids.max, --memory its memory.max,
// --cpus (or --cpu-quota) its cpu.max and --cpuset-cpus its cpuset.cpus.
// The guest is the container's alone, so a single group under the root
// does; dockerd's other cgroup limits size the VM instead. The group is
// made only for a limit (at setup, or by docker update, which adopts the
// processes already running) or a freeze: mounting it and moving each
// process in costs every start ~100 ms of guest time under TCG.
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

// limitFile is one file a limit is written to, the controller that
// keeps it, and its value.
type limitFile struct {
	controller, file, value string
	limited                 bool
	// optional: a guest kernel without the controller goes without the
	// limit rather than refusing it (the host keeps it too).
	optional bool
}

// limitFiles are the files l is written to.
func limitFiles(l proto.LimitsSpec) []limitFile {
	period := l.CPUPeriod
	if period <= 0 {
		period = 100_000
	}
	return []limitFile{
		{"pids", "pids.max", maxValue(l.PidsLimit), l.PidsLimit > 0, false},
		{"memory", "memory.max", maxValue(l.MemoryLimit), l.MemoryLimit > 0, false},
		{"cpu", "cpu.max", maxValue(l.CPUQuota) + " " + strconv.FormatInt(period, 10), l.CPUQuota > 0, false},
		// "" gives the group every CPU its parent has.
		{"cpuset", "cpuset.cpus", l.CpusetCPUs, l.CpusetCPUs != "", true},
	}
}

// guestCpuset is the part of want (a cpuset list) that names CPUs the
// guest has, as the root's cpuset.cpus.effective lists them: the VM may
// have fewer vCPUs than the host has CPUs, and the host pins the VM to
// the whole set. "" when none is left, which limits nothing.
func guestCpuset(want, have string) (string, error) {
	w, err := cpuset.Parse(strings.TrimSpace(want))
	if err != nil {
		return "", &agentError{proto.KindInvalid, fmt.Sprintf("cpuset %q: %v", want, err)}
	}
	h, err := cpuset.Parse(strings.TrimSpace(have))
	if err != nil {
		return "", fmt.Errorf("the guest's CPUs %q: %w", have, err)
	}
	return w.Intersection(h).String(), nil
}

// maxValue is a cgroup limit's value: "max" for none.
func maxValue(v int64) string {
	if v <= 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

// Root mounts cgroup2 (once per boot) and returns the guest's root
// cgroup.
func (g GuestCgroups) Root() (string, error) {
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
	return dir, nil
}

// Create mounts cgroup2 (once per boot), enables the pids, memory and cpu
// controllers the guest kernel has and makes the container's group.
func (g GuestCgroups) Create(limits proto.LimitsSpec) (string, error) {
	dir, err := g.Root()
	if err != nil {
		return "", err
	}
	// A kernel built without a controller (a minimal guest kernel may
	// lack one) still gets a group: a freeze needs none, and a limit that
	// needs a missing one fails in SetLimits, in its own words.
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	have := strings.Fields(string(b))
	var enable []string
	for _, l := range limitFiles(proto.LimitsSpec{}) {
		if slices.Contains(have, l.controller) {
			enable = append(enable, "+"+l.controller)
		}
	}
	if len(enable) > 0 {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0); err != nil {
			return "", fmt.Errorf("enable the %s controllers: %w", strings.Join(enable, " "), err)
		}
	}
	if err := os.Mkdir(g.group(), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	if err := g.SetLimits(limits); err != nil {
		return "", err
	}
	return g.group(), nil
}

// SetLimits writes pids.max, memory.max and cpu.max. A limit whose
// controller the guest kernel lacks is refused; lifting it is nothing
// to do.
func (g GuestCgroups) SetLimits(limits proto.LimitsSpec) error {
	for _, l := range limitFiles(limits) {
		path := filepath.Join(g.group(), l.file)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			if !l.limited || l.optional {
				continue
			}
			return &agentError{proto.KindInvalid, fmt.Sprintf("set %s: the guest kernel has no cgroup %s controller", l.file, l.controller)}
		}
		if l.controller == "cpuset" && l.limited {
			have, err := os.ReadFile(filepath.Join(g.dir(), "cpuset.cpus.effective"))
			if err != nil {
				return fmt.Errorf("set %s: %w", l.file, err)
			}
			if l.value, err = guestCpuset(l.value, string(have)); err != nil {
				return err
			}
		}
		data := l.value
		if data == "" {
			data = "\n" // a write of nothing would not reach the kernel's handler
		}
		if err := os.WriteFile(path, []byte(data), 0); err != nil {
			return fmt.Errorf("set %s: %w", l.file, err)
		}
	}
	return nil
}

// Adopt moves every process of the guest but the agent (PID 1) and kernel
// threads into the group, pass after pass until one finds none left
// outside (a process may fork while it runs).
func (g GuestCgroups) Adopt() error {
	procs := filepath.Join(g.group(), "cgroup.procs")
	for range 10 {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return fmt.Errorf("adopt processes: %w", err)
		}
		moved := 0
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == 1 {
				continue
			}
			cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
			if err != nil || strings.TrimSpace(string(cg)) != "0::/" {
				continue
			}
			if _, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err != nil {
				continue // a kernel thread, or gone
			}
			if os.WriteFile(procs, []byte(e.Name()), 0) == nil {
				moved++
			}
		}
		if moved == 0 {
			return nil
		}
	}
	return nil
}

// Freeze writes the group's cgroup.freeze. A freeze takes effect process
// by process, so it then waits for cgroup.events to say the whole group is
// frozen; a thaw takes effect at once.
func (g GuestCgroups) Freeze(ctx context.Context, frozen bool) error {
	v := "0"
	if frozen {
		v = "1"
	}
	if err := os.WriteFile(filepath.Join(g.group(), "cgroup.freeze"), []byte(v), 0); err != nil {
		return fmt.Errorf("write cgroup.freeze: %w", err)
	}
	if !frozen {
		return nil
	}
	events := filepath.Join(g.group(), "cgroup.events")
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		b, err := os.ReadFile(events)
		if err != nil {
			return fmt.Errorf("read cgroup.events: %w", err)
		}
		if slices.Contains(strings.Split(string(b), "\n"), "frozen 1") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the container's processes to freeze: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// freezeTimeout bounds a freeze: a process in an uninterruptible sleep
// (a disk or a FUSE server that does not answer) does not freeze until it
// wakes, and a checkpoint had better fail than wait for it.
const freezeTimeout = 10 * time.Second

// freeze carries out OpFreeze. The first freeze puts every process of the
// container in its cgroup, making the group if no limit has made it (at
// the price of a move per process, paid here rather than at every start).
// A thaw waits for the last refresh's RNG reseed, so that a restored
// copy's processes draw their own numbers from the start.
func (a *Agent) freeze(ctx context.Context, spec *proto.FreezeSpec, sessionClosed <-chan struct{}) error {
	if spec == nil {
		return &agentError{proto.KindInvalid, "freeze: missing spec"}
	}
	if !spec.Frozen {
		if err := a.awaitReseed(ctx, sessionClosed); err != nil {
			return fmt.Errorf("thaw: %w", err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !spec.Frozen {
		if !a.frozen {
			return nil
		}
		if err := a.opts.Cgroups.Freeze(ctx, false); err != nil {
			return fmt.Errorf("thaw: %w", err)
		}
		a.frozen = false
		return nil
	}
	if a.root == "" {
		return nil // no container: nothing runs but the agent
	}
	if a.opts.Cgroups == nil {
		return &agentError{proto.KindInvalid, "freeze: this agent keeps no cgroups"}
	}
	if a.cgroupDir == "" {
		// No group yet means no limits.
		dir, err := a.opts.Cgroups.Create(proto.LimitsSpec{})
		if err != nil {
			return fmt.Errorf("freeze: %w", err)
		}
		// From here on the container's processes start in the group, and
		// their children are born in it. Until the others are moved in,
		// the next freeze must try again.
		a.cgroupDir, a.cgroupLate = dir, true
		if err := a.opts.Cgroups.Adopt(); err != nil {
			a.cgroupDir = ""
			return fmt.Errorf("freeze: %w", err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, freezeTimeout)
	defer cancel()
	if err := a.opts.Cgroups.Freeze(fctx, true); err != nil {
		if terr := a.opts.Cgroups.Freeze(context.WithoutCancel(ctx), false); terr != nil {
			a.log.Warn("thaw after a failed freeze", "err", terr)
		}
		return fmt.Errorf("freeze: %w", err)
	}
	a.frozen = true
	return nil
}

// createCgroup makes the container's cgroup where the agent can; without
// one a limit cannot be kept, and is refused.
func (a *Agent) createCgroup(limits proto.LimitsSpec) (string, error) {
	if limits.None() {
		return "", nil
	}
	if a.opts.Cgroups == nil {
		return "", &agentError{proto.KindInvalid, "setup: this agent keeps no cgroups: a pids, memory or cpu limit cannot be applied"}
	}
	dir, err := a.opts.Cgroups.Create(limits)
	if err != nil {
		return "", fmt.Errorf("setup: %w", err)
	}
	return dir, nil
}

// setLimits applies OpLimits to the running container.
func (a *Agent) setLimits(spec *proto.LimitsSpec) error {
	if spec == nil {
		return &agentError{proto.KindInvalid, "limits: missing limits"}
	}
	if a.opts.Cgroups == nil {
		return &agentError{proto.KindInvalid, "limits: this agent keeps no cgroups"}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	limits := *spec
	if a.cgroupDir != "" {
		return a.opts.Cgroups.SetLimits(limits)
	}
	if limits.None() {
		return nil // no limit, and no group to lift one from
	}
	if a.root == "" {
		return &agentError{proto.KindInvalid, "limits: the container root is not set up"}
	}
	dir, err := a.opts.Cgroups.Create(limits)
	if err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	// Processes started from now on join it themselves; those running
	// are moved in.
	a.cgroupDir, a.cgroupLate = dir, true
	return a.opts.Cgroups.Adopt()
}

// cgroupFdEnv hands --init's init the container's cgroup (a descriptor
// number): it starts its child there and drops the variable. Keep in step
// with cinit/src/init.c.
const cgroupFdEnv = "HUSK_CGROUP_FD"
