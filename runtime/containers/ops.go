package containers

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"

	"github.com/husk-vm/husk/runtime/timestamp"
	"github.com/husk-vm/husk/shim/host"
)

// validName is dockerd's container name rule.
var validName = regexp.MustCompile(`^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// Rename gives a container a new name, in dockerd's words when it cannot.
func (m *Manager) Rename(ctx context.Context, ref, newName string) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	newName = strings.TrimPrefix(newName, "/")
	if newName == "" {
		return errdefs.ErrInvalidArgument.WithMessage("Neither old nor new names may be empty")
	}
	if !validName.MatchString("/" + newName) {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Error when allocating new name: Invalid container name (/%s), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed", newName))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.rec.Name
	if old == newName {
		return errdefs.ErrInvalidArgument.WithMessage("Renaming a container with the same name as its current name")
	}
	m.mu.Lock()
	if other, taken := m.byName[newName]; taken {
		m.mu.Unlock()
		otherID := ""
		if other != nil {
			otherID = other.rec.ID
		}
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Error when allocating new name: Conflict. The container name \"/%s\" is already in use by container \"%s\". You have to remove (or rename) that container to be able to reuse that name.", newName, otherID))
	}
	m.byName[newName] = c
	delete(m.byName, old)
	m.mu.Unlock()
	c.rec.Name = newName
	if err := c.save(); err != nil {
		c.rec.Name = old
		m.mu.Lock()
		delete(m.byName, newName)
		m.byName[old] = c
		m.mu.Unlock()
		return err
	}
	c.emitLocked(events.ActionRename, map[string]string{"oldName": "/" + old})
	return nil
}

// Pause freezes the container's processes in the guest, as dockerd's
// pause freezes them with the cgroup freezer: the VM runs on, idle, so the
// guest's clocks keep the host's time, and a snapshot taken while the
// container is paused holds its processes frozen. A VM whose agent cannot
// freeze has its vCPUs stopped instead.
func (m *Manager) Pause(ctx context.Context, ref string) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.run == nil || !c.rec.State.Running:
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is not running", c.rec.ID))
	case c.rec.State.Paused:
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is already paused", c.rec.ID))
	}
	if err := c.pauseLocked(ctx, c.run); err != nil {
		return fmt.Errorf("pause %s: %w", c.rec.ID[:12], err)
	}
	c.rec.State.Paused = true
	c.rec.State.Status = container.StatePaused
	c.stopHealthLocked()
	if err := c.save(); err != nil {
		c.m.log.Error("persist pause", "id", c.rec.ID[:12], "err", err)
	}
	c.emitLocked(events.ActionPause, nil)
	return nil
}

// pauseLocked freezes r's processes or, where the agent cannot or does
// not answer, stops its VM's vCPUs, which needs nothing of the guest.
// Callers hold c.mu.
func (c *ctr) pauseLocked(ctx context.Context, r *run) error {
	frozen, err := c.freezeProcesses(ctx, r, "pause")
	switch {
	case errors.Is(err, errAgentSilent):
		c.m.log.Warn("the guest did not answer the freeze; stopping its VM's vCPUs instead", "id", c.rec.ID[:12])
	case err != nil || frozen:
		return err
	}
	if err := r.machine.Pause(ctx); err != nil {
		return err
	}
	r.vmPaused = true
	return nil
}

// Unpause thaws a paused container's processes, or resumes its VM where
// Pause had to stop it.
func (m *Manager) Unpause(ctx context.Context, ref string) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == nil || !c.rec.State.Paused {
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is not paused", c.rec.ID))
	}
	if err := c.resumeLocked(ctx); err != nil {
		return err
	}
	c.emitLocked(events.ActionUnPause, nil)
	return nil
}

// resumeLocked thaws a paused container's processes, or resumes its VM
// where Pause stopped it. Callers hold c.mu.
func (c *ctr) resumeLocked(ctx context.Context) error {
	r := c.run
	if r.vmPaused {
		if err := c.resumeVM(ctx, r); err != nil {
			return fmt.Errorf("unpause %s: %w", c.rec.ID[:12], err)
		}
		r.vmPaused = false
		// A pause whose freeze went unanswered stopped the VM, and the
		// freeze may have landed all the same.
		if err := c.thawProcesses(ctx, r.client, "unpause"); err != nil {
			c.m.log.Warn("thaw the resumed container's processes", "id", c.rec.ID[:12], "err", err)
		}
	} else if err := c.thawProcesses(ctx, r.client, "pause"); err != nil {
		if errors.Is(err, errAgentSilent) {
			// The thaw may land later, which would leave the container
			// running while it is recorded paused: it stays paused
			// with its VM stopped, which needs nothing of the guest,
			// and the next unpause resumes the VM and thaws again.
			if perr := r.machine.Pause(ctx); perr == nil {
				r.vmPaused = true
			} else {
				c.m.log.Error("stop the vCPUs of a container whose thaw went unanswered", "id", c.rec.ID[:12], "err", perr)
			}
		}
		return fmt.Errorf("unpause %s: %w", c.rec.ID[:12], err)
	}
	c.rec.State.Paused = false
	c.rec.State.Status = container.StateRunning
	c.resumeHealthLocked()
	if err := c.save(); err != nil {
		c.m.log.Error("persist unpause", "id", c.rec.ID[:12], "err", err)
	}
	return nil
}

// resumeVM resumes r's VM and sets the guest's clock to the host's: a
// paused guest's clock stands still (QEMU stops the guest's TSC under TCG,
// and kvmclock under KVM), where a container frozen by dockerd keeps the
// host's time. A guest that cannot be told the time runs on regardless.
func (c *ctr) resumeVM(ctx context.Context, r *run) error {
	if err := r.machine.Resume(ctx); err != nil {
		return err
	}
	c.freshenResumed(ctx, r)
	return nil
}

// freshenResumed sets a resumed guest's clock (resumeVM), giving its
// agent agentTimeout: callers hold c.mu.
func (c *ctr) freshenResumed(ctx context.Context, r *run) {
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	if err := r.client.Freshen(ctx, nil); err != nil {
		c.m.log.Warn("set the resumed guest's clock", "id", c.rec.ID[:12], "err", err)
	}
}

// freezeProcesses freezes the container's processes (proto.OpFreeze) and
// says whether it did, for a snapshot or a pause (why, for the log). A
// snapshot's restored copies then run only once their refresh has given
// them their own clock and RNG state; without the freeze they ran on the
// snapshot's, the same in every copy, until it came. A paused container
// is frozen and nothing more, as under dockerd. An agent older than the
// op cannot freeze, and its container is snapshot as it is, or paused by
// stopping its VM. A freeze that fails fails the snapshot or pause, as
// CRIU's and runc's do.
//
// The agent gets agentTimeout to answer (errAgentSilent): callers hold
// c.mu, and with it every docker ps. The freeze of a guest that did not
// answer may still land once the guest runs again; it is thawed then
// unless the container is paused by then (askAgent).
func (c *ctr) freezeProcesses(ctx context.Context, r *run, why string) (bool, error) {
	start := time.Now()
	err := c.askAgent(ctx, r, func(ctx context.Context) error { return r.client.Freeze(ctx, true) }, func() {
		if c.rec.State.Paused {
			return // its unpause thaws it
		}
		c.m.log.Warn("the guest answered a freeze late; thawing its processes", "id", c.rec.ID[:12])
		if err := c.thawProcesses(context.Background(), r.client, "late freeze"); err != nil {
			c.m.log.Error("thaw after a late freeze", "id", c.rec.ID[:12], "err", err)
		}
	})
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		c.m.log.Debug("no freeze of the container's processes", "id", c.rec.ID[:12], "for", why, "err", err)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("freeze the container's processes: %w", err)
	}
	c.m.log.Debug("froze the container's processes", "id", c.rec.ID[:12], "for", why, "took", time.Since(start))
	return true, nil
}

// agentTimeout bounds what the daemon waits on a guest's agent for where
// it cannot wait forever: a signal's delivery, which holds up a kill, and
// the changes made under the container's lock, which holds up every
// docker ps (a freeze, a thaw, a pids limit, a resumed guest's clock). An
// agent answers those in milliseconds even on a loaded TCG host; one that
// does not is wedged with its guest.
const agentTimeout = 5 * time.Second

// errAgentSilent: the guest's agent did not answer within agentTimeout.
var errAgentSilent = fmt.Errorf("the guest's agent did not answer within %s", agentTimeout)

// askAgent has r's agent make a change (call) for a caller that holds
// c.mu, and with it every docker ps: the agent gets agentTimeout, or
// until ctx ends, to answer, and is errAgentSilent after that. Its guest
// is then wedged, but may run again and make the change after all, which
// would leave the guest unlike what its caller recorded: once the change
// is made, undo runs, holding c.mu, if the container still runs r.
func (c *ctr) askAgent(ctx context.Context, r *run, call func(context.Context) error, undo func()) error {
	answered := make(chan error, 1)
	go func() { answered <- call(context.WithoutCancel(ctx)) }()
	timer := time.NewTimer(agentTimeout)
	defer timer.Stop()
	late := func() {
		if err := <-answered; err != nil {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.run == r {
			undo()
		}
	}
	select {
	case err := <-answered:
		return err
	case <-timer.C:
		go late()
		return errAgentSilent
	case <-ctx.Done():
		go late()
		return ctx.Err()
	}
}

// thawProcesses thaws what freezeProcesses froze; a thaw waits for the
// guest's last refresh. A container that cannot be thawed is stuck, which
// only a restart mends. The agent gets agentTimeout, as for a freeze
// (errAgentSilent); a thaw that lands late does what was asked.
func (c *ctr) thawProcesses(ctx context.Context, client *host.Client, why string) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	err := client.Freeze(ctx, false)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil // an agent that cannot freeze froze nothing
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("thaw the container's processes: %w", errAgentSilent)
	case err != nil:
		return fmt.Errorf("thaw the container's processes: %w", err)
	}
	c.m.log.Debug("thawed the container's processes", "id", c.rec.ID[:12], "for", why, "took", time.Since(start))
	return nil
}

// thawAfterSnapshot thaws what a snapshot froze, logging a failure: the
// snapshot's outcome stands either way.
func (c *ctr) thawAfterSnapshot(ctx context.Context, r *run) {
	if err := c.thawProcesses(ctx, r.client, "snapshot"); err != nil {
		c.m.log.Error("thaw after a snapshot", "id", c.rec.ID[:12], "err", err)
	}
}

// resumeForSignal unpauses a paused container before it is signalled: a
// frozen process acts on no signal and a stopped VM delivers none, and
// dockerd stops and kills paused containers. The guest gets agentTimeout
// to answer the thaw, as for the signal itself. For a signal that ends
// in a SIGKILL (kill, stop, rm -f), a guest that cannot be resumed has
// its VM killed instead, which ends the process as surely: dockerd's
// SIGKILL does not wait on the container either.
func (c *ctr) resumeForSignal(ctx context.Context, orKill bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.run
	if r == nil || !c.rec.State.Paused {
		return nil
	}
	err := c.resumeLocked(ctx)
	if err == nil || !orKill {
		return err
	}
	c.m.log.Warn("could not unpause the container to kill it; killing the VM", "id", c.rec.ID[:12], "err", err)
	r.vmKilled.Store(true)
	_ = r.machine.Kill()
	return nil
}

// Top lists the container's processes as ps with psArgs would (top.go).
func (m *Manager) Top(ctx context.Context, ref, psArgs string) (container.TopResponse, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return container.TopResponse{}, err
	}
	cols, err := psLayout(psArgs)
	if err != nil {
		return container.TopResponse{}, err
	}
	if !slices.ContainsFunc(cols, func(c psColumn) bool { return c.header == "PID" }) {
		// dockerd finds the container's rows by their PID.
		return container.TopResponse{}, errors.New("Couldn't find PID field in ps output")
	}
	c.mu.Lock()
	r := c.run
	running := c.rec.State.Running
	vmStopped := r != nil && r.vmPaused
	c.mu.Unlock()
	switch {
	case r == nil || !running:
		return container.TopResponse{}, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is not running", c.rec.ID))
	case vmStopped:
		// dockerd lists a paused container's frozen processes, and so
		// does the agent; only a VM whose vCPUs pause stopped cannot.
		return container.TopResponse{}, errVMStopped(c.rec.ID)
	}
	procs, err := r.proc.Top(ctx)
	if err != nil {
		return container.TopResponse{}, fmt.Errorf("list processes of %s: %w", c.rec.ID[:12], err)
	}
	c.emit(events.ActionTop, nil)
	now := time.Now()
	resp := container.TopResponse{Processes: [][]string{}}
	for _, col := range cols {
		resp.Titles = append(resp.Titles, col.header)
	}
	for _, p := range procs {
		row := make([]string, len(cols))
		for i, col := range cols {
			row[i] = col.value(p, now)
		}
		resp.Processes = append(resp.Processes, row)
	}
	return resp, nil
}

// cpuPercent is ps's C column: CPU time over lifetime, in whole percent.
func cpuPercent(cpu, life time.Duration) string {
	if life <= 0 {
		return "0"
	}
	return fmt.Sprint(int64(cpu * 100 / life))
}

// startTime is ps's STIME: the time of day today, else the date.
func startTime(t, now time.Time) string {
	if y1, m1, d1 := t.Date(); func() bool { y2, m2, d2 := now.Date(); return y1 == y2 && m1 == m2 && d1 == d2 }() {
		return t.Format("15:04")
	}
	return t.Format("Jan02")
}

// cpuTime is ps's TIME: [DD-]HH:MM:SS.
func cpuTime(d time.Duration) string {
	s := int64(d / time.Second)
	if days := s / 86400; days > 0 {
		return fmt.Sprintf("%d-%02d:%02d:%02d", days, s/3600%24, s/60%60, s%60)
	}
	return fmt.Sprintf("%02d:%02d:%02d", s/3600, s/60%60, s%60)
}

// PruneOptions is POST /containers/prune's filters.
type PruneOptions struct {
	Filters map[string][]string
}

// Prune removes every container that is not running and matches the
// filters ("until", "label", "label!").
func (m *Manager) Prune(ctx context.Context, opts PruneOptions) (container.PruneReport, error) {
	var until time.Time
	for k, vs := range opts.Filters {
		switch k {
		case "label", "label!":
		case "until":
			if len(vs) > 1 {
				return container.PruneReport{}, errdefs.ErrInvalidArgument.WithMessage("more than one until filter specified")
			}
			t, err := timestamp.Parse(vs[0], time.Now())
			if err != nil {
				return container.PruneReport{}, errdefs.ErrInvalidArgument.WithMessage(err.Error())
			}
			until = t
		default:
			return container.PruneReport{}, errdefs.ErrInvalidArgument.WithMessage("invalid filter '" + k + "'")
		}
	}
	all := m.all()
	var report container.PruneReport
	for _, c := range all {
		c.mu.Lock()
		rec := c.rec
		active := c.run != nil || c.busy
		c.mu.Unlock()
		if active || (!until.IsZero() && !rec.Created.Before(until)) ||
			!allLabels(opts.Filters["label"], labelsOf(rec.Config)) || anyLabel(opts.Filters["label!"], labelsOf(rec.Config)) {
			continue
		}
		// Measured before the removal, as dockerd does, for SpaceReclaimed.
		rw, _, sizeErr := m.size(ctx, c)
		if err := m.remove(ctx, c, rec.ID, RemoveOptions{}); err != nil {
			if errdefs.IsConflict(err) {
				continue // started meanwhile
			}
			return report, err
		}
		report.ContainersDeleted = append(report.ContainersDeleted, rec.ID)
		if sizeErr == nil {
			report.SpaceReclaimed += uint64(rw)
		}
	}
	return report, nil
}

// anyLabel: whether any of the "k" or "k=v" filters matches.
func anyLabel(filters []string, have map[string]string) bool {
	for _, f := range filters {
		if allLabels([]string{f}, have) {
			return true
		}
	}
	return false
}
