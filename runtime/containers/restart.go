package containers

import (
	"context"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
)

// Restart policies, as dockerd's restart manager applies them: after an
// exit the container is started again after a delay that starts at 100 ms
// and doubles up to a minute (back to 100 ms once a run lasted 10 s).
// "always" restarts unless stopped through the API; "unless-stopped" also
// stays down across daemon restarts once stopped; "on-failure[:N]" restarts
// after a non-zero exit, at most N times.
const (
	restartFirstDelay = 100 * time.Millisecond
	restartMaxDelay   = time.Minute
	restartResetAfter = 10 * time.Second
)

// restartState is a container's restart bookkeeping that is not persisted.
type restartState struct {
	delay time.Duration
	// pending fires the next policy restart; nil when none is scheduled.
	pending *time.Timer
	// stopped is set by an API stop of the current run: it must not come
	// back, whatever the policy.
	stopped bool
}

// wantsRestart applies the policy to an exit. Callers hold c.mu.
func (c *ctr) wantsRestart(code int) bool {
	if c.restart.stopped || c.removed || c.m.isShuttingDown() {
		return false
	}
	p := c.rec.HostConfig.RestartPolicy
	switch p.Name {
	case container.RestartPolicyAlways:
		return true
	case container.RestartPolicyUnlessStopped:
		return !c.rec.ManuallyStopped
	case container.RestartPolicyOnFailure:
		return code != 0 && (p.MaximumRetryCount == 0 || c.rec.RestartCount < p.MaximumRetryCount)
	}
	return false
}

// scheduleRestart marks the container restarting and starts it again
// after the back-off delay. Callers hold c.mu.
func (c *ctr) scheduleRestart(ranFor time.Duration) {
	switch {
	case ranFor >= restartResetAfter || c.restart.delay == 0:
		c.restart.delay = restartFirstDelay
	default:
		c.restart.delay = min(c.restart.delay*2, restartMaxDelay)
	}
	c.rec.State.Restarting = true
	c.rec.State.Status = container.StateRestarting
	if err := c.save(); err != nil {
		c.m.log.Error("persist restarting state", "id", c.rec.ID[:12], "err", err)
	}
	c.restart.pending = time.AfterFunc(c.restart.delay, func() {
		c.mu.Lock()
		if c.restart.pending == nil || c.removed || c.run != nil {
			c.mu.Unlock()
			return
		}
		c.restart.pending = nil
		c.rec.RestartCount++
		c.rec.State.Restarting = false
		c.mu.Unlock()
		if _, err := c.start(context.Background(), c.rec.ID); err != nil {
			c.m.log.Error("restart by policy", "id", c.rec.ID[:12], "err", err)
			c.mu.Lock()
			c.rec.State.Status = container.StateExited
			if err := c.save(); err != nil {
				c.m.log.Error("persist failed restart", "id", c.rec.ID[:12], "err", err)
			}
			c.mu.Unlock()
		}
	})
}

// cancelRestart drops a scheduled restart, leaving the container exited;
// it reports whether one was pending. Callers hold c.mu.
func (c *ctr) cancelRestart() bool {
	if c.restart.pending == nil {
		return false
	}
	c.restart.pending.Stop()
	c.restart.pending = nil
	c.rec.State.Restarting = false
	c.rec.State.Status = container.StateExited
	if err := c.save(); err != nil {
		c.m.log.Error("persist cancelled restart", "id", c.rec.ID[:12], "err", err)
	}
	return true
}

func (m *Manager) isShuttingDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shuttingDown
}

// RestartOnBoot starts the containers a daemon start brings back: those
// whose policy says so and that are not running (the daemon stopped them
// when it shut down, or they had exited). It returns once every start has
// ended, as dockerd does before it serves its API: a client that finds the
// daemon up finds them running. Call it after Restore and once the
// networks are started: a start attaches the container to its network's
// bridge, which a clean shutdown deleted and only the networks' Start
// makes again.
func (m *Manager) RestartOnBoot(ctx context.Context) {
	all := m.all()
	var wg sync.WaitGroup
	for _, c := range all {
		c.mu.Lock()
		// A restart pending when the daemon went away counts as exited.
		if c.rec.State.Restarting {
			c.rec.State.Restarting = false
			c.rec.State.Status = container.StateExited
		}
		restart := c.run == nil && c.rec.State.Status == container.StateExited && c.wantsRestart(c.rec.State.ExitCode)
		c.mu.Unlock()
		if !restart {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.start(ctx, c.rec.ID); err != nil {
				m.log.Error("restart on daemon start", "id", c.rec.ID[:12], "err", err)
			}
		}()
	}
	wg.Wait()
}
