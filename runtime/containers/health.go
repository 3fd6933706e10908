package containers

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
)

// Health checks follow dockerd's daemon/health.go: each probe is an exec
// in the container (so it has the exec events and the container's user,
// working directory and environment), run every interval once the previous
// one ended; its result is folded into State.Health.
const (
	defaultProbeInterval = 30 * time.Second
	defaultProbeTimeout  = 30 * time.Second
	defaultProbeRetries  = 3
	// maxHealthLog is how many results State.Health.Log keeps.
	maxHealthLog = 5
	// maxProbeOutput bounds a result's Output; more is cut and "..." added.
	maxProbeOutput = 4096
	// minHealthDuration is the shortest interval, timeout or start period
	// dockerd accepts.
	minHealthDuration = time.Millisecond
	// probeReapTimeout bounds the wait for a killed probe to be reaped.
	probeReapTimeout = 10 * time.Second
)

// healthMonitor is one run of a container's probes; cancel ends it.
type healthMonitor struct {
	cancel context.CancelFunc
}

// validateHealthcheck refuses what dockerd refuses at create, in its words.
func validateHealthcheck(hc *container.HealthConfig) error {
	if hc == nil {
		return nil
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Interval", hc.Interval}, {"Timeout", hc.Timeout}, {"StartPeriod", hc.StartPeriod}, {"StartInterval", hc.StartInterval}} {
		if d.v != 0 && d.v < minHealthDuration {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%s in Healthcheck cannot be less than %s", d.name, minHealthDuration))
		}
	}
	if hc.Retries < 0 {
		return errdefs.ErrInvalidArgument.WithMessage("Retries in Healthcheck cannot be negative")
	}
	return nil
}

// probeCommand is the probe's argv, or nil when the container has no
// probe ("NONE", no test, or a test type dockerd does not know).
func probeCommand(cfg *container.Config) []string {
	hc := cfg.Healthcheck
	if hc == nil || len(hc.Test) == 0 {
		return nil
	}
	switch hc.Test[0] {
	case "CMD":
		return slices.Clone(hc.Test[1:])
	case "CMD-SHELL":
		shell := []string{"/bin/sh", "-c"}
		if len(cfg.Shell) > 0 {
			shell = cfg.Shell
		}
		return append(slices.Clone(shell), hc.Test[1:]...)
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// startHealthLocked starts probing a container whose main process now
// runs (a start, a restore, a reattach after a daemon restart): its status
// goes back to "starting", keeping the last results, as dockerd's
// initHealthMonitor does. Callers hold c.mu.
func (c *ctr) startHealthLocked() {
	c.stopHealthLocked()
	cmd := probeCommand(c.rec.Config)
	if cmd == nil {
		c.rec.State.Health = nil
		return
	}
	h := &container.Health{Status: container.Starting, Log: []*container.HealthcheckResult{}}
	if old := c.rec.State.Health; old != nil {
		h.Log = old.Log
	}
	c.rec.State.Health = h
	c.resumeHealthLocked()
}

// resumeHealthLocked starts the probe loop without touching the status
// (unpause). Callers hold c.mu.
func (c *ctr) resumeHealthLocked() {
	if c.health != nil || c.rec.State.Health == nil {
		return
	}
	cmd := probeCommand(c.rec.Config)
	if cmd == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	mon := &healthMonitor{cancel: cancel}
	c.health = mon
	go c.probeLoop(ctx, mon, cmd, *c.rec.Config.Healthcheck, parseTime(c.rec.State.StartedAt))
}

// stopHealthLocked ends the probe loop (the container stopped or was
// paused). As dockerd says for compatibility, a container whose probes
// stopped is unhealthy. Callers hold c.mu.
func (c *ctr) stopHealthLocked() {
	if c.health == nil {
		return
	}
	c.health.cancel()
	c.health = nil
	if h := c.rec.State.Health; h != nil {
		c.rec.State.Health = &container.Health{Status: container.Unhealthy, FailingStreak: h.FailingStreak, Log: h.Log}
	}
}

// probeLoop runs the probes of one monitor until ctx ends.
func (c *ctr) probeLoop(ctx context.Context, mon *healthMonitor, cmd []string, hc container.HealthConfig, started time.Time) {
	interval := orDefault(hc.Interval, defaultProbeInterval)
	timeout := orDefault(hc.Timeout, defaultProbeTimeout)
	startPeriod := hc.StartPeriod
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		next := interval
		// API 1.44's StartInterval paces the probes of a starting
		// container within its start period; without it dockerd 20.10's
		// single interval applies.
		if hc.StartInterval > 0 && time.Since(started) < startPeriod && c.healthStatus() == container.Starting {
			next = hc.StartInterval
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		res := c.m.probe(ctx, c, cmd, timeout)
		if ctx.Err() != nil {
			return
		}
		c.recordProbe(mon, hc, started, res)
	}
}

func (c *ctr) healthStatus() container.HealthStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rec.State.Health == nil {
		return container.NoHealthcheck
	}
	return c.rec.State.Health.Status
}

// recordProbe folds a result into the container's health unless mon was
// stopped meanwhile; a change of status is saved and published.
func (c *ctr) recordProbe(mon *healthMonitor, hc container.HealthConfig, started time.Time, res *container.HealthcheckResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.health != mon || c.rec.State.Health == nil {
		return
	}
	h, changed := applyProbeResult(*c.rec.State.Health, hc, started, res)
	// A new value each time: inspect hands out the old one unlocked.
	c.rec.State.Health = &h
	if !changed {
		return
	}
	if err := c.save(); err != nil {
		c.m.log.Error("persist health status", "id", c.rec.ID[:12], "err", err)
	}
	c.emitLocked(events.Action(string(events.ActionHealthStatus)+": "+string(h.Status)), nil)
}

// applyProbeResult is dockerd's handleProbeResult: the result joins the
// log (the last maxHealthLog kept); success makes the container healthy,
// and a failure outside the start period of a container that never
// succeeded counts towards Retries, after which it is unhealthy. It
// reports whether the status changed.
func applyProbeResult(h container.Health, hc container.HealthConfig, started time.Time, res *container.HealthcheckResult) (container.Health, bool) {
	old := h.Status
	h.Log = append(slices.Clone(h.Log), res)
	if len(h.Log) > maxHealthLog {
		h.Log = h.Log[len(h.Log)-maxHealthLog:]
	}
	retries := hc.Retries
	if retries <= 0 {
		retries = defaultProbeRetries
	}
	if res.ExitCode == 0 {
		h.FailingStreak = 0
		h.Status = container.Healthy
		return h, h.Status != old
	}
	if h.Status == container.Starting && res.Start.Sub(started) < hc.StartPeriod {
		return h, false
	}
	h.FailingStreak++
	if h.FailingStreak >= retries {
		h.Status = container.Unhealthy
	}
	return h, h.Status != old
}

// probe runs cmd as an exec in c and reports its result. A probe that
// outlives timeout is killed and reported as dockerd reports it; one that
// cannot run has exit code -1 and the error as output.
func (m *Manager) probe(ctx context.Context, c *ctr, cmd []string, timeout time.Duration) *container.HealthcheckResult {
	res := &container.HealthcheckResult{Start: time.Now()}
	fail := func(err error) *container.HealthcheckResult {
		res.End, res.ExitCode, res.Output = time.Now(), -1, err.Error()
		return res
	}
	id, err := m.ExecCreate(ctx, c.rec.ID, ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return fail(err)
	}
	// Probes are not kept as exec instances once done: one per interval
	// for the container's life would pile up.
	defer m.execs.remove(id)
	e, err := m.execs.get(id)
	if err != nil {
		return fail(err)
	}
	out := &limitedBuffer{}
	probeCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = m.ExecStart(probeCtx, id, ExecStartOptions{Stdout: out, Stderr: out})
	if probeCtx.Err() != nil {
		res.End = time.Now()
		e.kill(m)
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		res.ExitCode, res.Output = -1, fmt.Sprintf("Health check exceeded timeout (%v)", timeout)
		return res
	}
	if err != nil {
		return fail(err)
	}
	e.mu.Lock()
	exit := e.exit
	e.mu.Unlock()
	if exit == nil {
		return fail(fmt.Errorf("healthcheck for container %s has no exit code", c.rec.ID))
	}
	res.End, res.ExitCode, res.Output = time.Now(), *exit, out.String()
	return res
}

// kill ends a probe that ran too long and waits (boundedly) until it is
// reaped, so that slow probes do not pile up. Only the probe's own process
// is killed, as runc kills an exec.
func (e *execInstance) kill(m *Manager) {
	e.mu.Lock()
	proc := e.proc
	e.mu.Unlock()
	if proc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeReapTimeout)
	defer cancel()
	if err := proc.Signal(ctx, syscall.SIGKILL); err != nil {
		m.log.Debug("kill health probe", "exec", e.id, "err", err)
		return
	}
	if _, err := proc.Wait(ctx); err != nil {
		m.log.Debug("wait for killed health probe", "exec", e.id, "err", err)
	}
}

// limitedBuffer keeps the first maxProbeOutput bytes of a probe's stdout
// and stderr, which are written to it concurrently.
type limitedBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	truncated bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	keep := min(maxProbeOutput-b.buf.Len(), len(p))
	if keep > 0 {
		b.buf.Write(p[:keep])
	}
	if keep < len(p) {
		b.truncated = true
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.truncated {
		return b.buf.String() + "..."
	}
	return b.buf.String()
}

// healthText is the part of `docker ps`'s STATUS that names the health.
func healthText(h *container.Health) string {
	if h == nil {
		return ""
	}
	if h.Status == container.Starting {
		return " (health: starting)"
	}
	return " (" + string(h.Status) + ")"
}

// healthFilterValue is the value the `health` filter of GET
// /containers/json compares with.
func healthFilterValue(s container.State) string {
	if s.Health == nil {
		return string(container.NoHealthcheck)
	}
	return string(s.Health.Status)
}

// validateHealthFilter refuses a value the health filter cannot match.
func validateHealthFilter(values []string) error {
	for _, v := range values {
		switch container.HealthStatus(v) {
		case container.NoHealthcheck, container.Starting, container.Healthy, container.Unhealthy:
		default:
			return errdefs.ErrInvalidArgument.WithMessage("Unrecognised filter value for health: " + v)
		}
	}
	return nil
}

// mergeHealthcheck applies an image's HEALTHCHECK under the user's, field
// by field, as dockerd's merge does (--health-interval alone keeps the
// image's test).
func mergeHealthcheck(user *container.HealthConfig, img *container.HealthConfig) *container.HealthConfig {
	if img == nil {
		return user
	}
	if user == nil {
		c := *img
		c.Test = slices.Clone(img.Test)
		return &c
	}
	out := *user
	if len(out.Test) == 0 {
		out.Test = slices.Clone(img.Test)
	}
	if out.Interval == 0 {
		out.Interval = img.Interval
	}
	if out.Timeout == 0 {
		out.Timeout = img.Timeout
	}
	if out.StartPeriod == 0 {
		out.StartPeriod = img.StartPeriod
	}
	if out.StartInterval == 0 {
		out.StartInterval = img.StartInterval
	}
	if out.Retries == 0 {
		out.Retries = img.Retries
	}
	return &out
}
