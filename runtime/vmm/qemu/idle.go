package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// ReleaseCommand, a QMP command, drops a TCG VM's translated code and
// gives its translation buffer's pages back to the host. It is husk's own
// (minimal/patches/tcg-release.patch): only the QEMU `make qemu` builds
// has it. QEMU never shrinks the buffer itself: a flush resets it only
// when it is full, and the pages stay resident either way.
const ReleaseCommand = "x-husk-tcg-release"

// idleShare is the share of one host CPU under which a VM counts as
// idle. An idle two-vCPU TCG guest (timer ticks, the agent parked) used
// ~0.6% on the project's machine; one running anything, far more.
const idleShare = 0.05

// cpuSample is a process's CPU time at an instant.
type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

// idleTracker decides when to release: once the VM has been idle for
// after, and only if it has been busy since the last release, which is
// what refilled the buffer.
type idleTracker struct {
	after time.Duration
	last  cpuSample
	// since is when the VM was last seen busy (or first seen).
	since time.Time
	// armed: busy since the last release, or since the start, whose code
	// is what a fresh VM holds.
	armed bool
}

func newIdleTracker(after time.Duration) *idleTracker {
	return &idleTracker{after: after, armed: true}
}

// observe records a sample and reports whether to release now.
func (t *idleTracker) observe(s cpuSample) bool {
	switch {
	case t.since.IsZero():
		t.since = s.at
	case busy(t.last, s):
		t.armed, t.since = true, s.at
	}
	t.last = s
	if t.armed && s.at.Sub(t.since) >= t.after {
		t.armed = false
		return true
	}
	return false
}

// busy says whether a process used more than idleShare of a CPU
// between two samples.
func busy(a, b cpuSample) bool {
	wall := b.at.Sub(a.at)
	return wall > 0 && float64(b.cpu-a.cpu) > idleShare*float64(wall)
}

// processCPU is a process's user and system time so far, from
// /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go runs on.
const clockTick = 10 * time.Millisecond

func parseStatCPU(b []byte) (time.Duration, error) {
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("no command name in /proc stat")
	}
	// After it: state (3) ... utime (14), stime (15).
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat: %d fields after the name", len(f))
	}
	var total time.Duration
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc stat: %w", err)
		}
		total += time.Duration(n) * clockTick
	}
	return total, nil
}

// releaseWhenIdle runs until the VM exits: each time its QEMU has been
// idle for after, having been busy before, it asks QEMU to release its
// translated code. A start leaves ~20 MiB of code that the guest runs
// once (the kernel's and the agent's paths of a start), and an idle
// guest needs little of it; what runs next is translated again, at the
// cost a restored VM's first exec pays. It stops for good when QEMU has
// no such command (any binary but `make qemu`'s) or runs under KVM, and
// does not start for a binary already known to lack the command.
func (m *Machine) releaseWhenIdle(after time.Duration) {
	if m.lacking(ReleaseCommand) != nil {
		return
	}
	// Fine enough that a `docker exec` of a moment counts as busy.
	tick := min(max(after/4, 250*time.Millisecond), time.Second)
	t := newIdleTracker(after)
	timer := time.NewTimer(tick)
	defer timer.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-timer.C:
		}
		timer.Reset(tick)
		cpu, err := processCPU(m.pid)
		if err != nil {
			return
		}
		if !t.observe(cpuSample{at: time.Now(), cpu: cpu}) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		released, err := m.releaseTranslations(ctx)
		cancel()
		var refused *QMPError
		switch {
		case errors.As(err, &refused):
			m.noteRefusal(ReleaseCommand, err)
			m.log.Debug("qemu keeps its translated code", "reason", err)
			return
		case err != nil:
			m.log.Debug("release translated code", "err", err)
		case released:
			m.log.Debug("released translated code", "idle", after)
		}
	}
}

// releaseTranslations asks a running VM's QEMU to drop its translated
// code; a paused or incoming VM is left as it is (released false).
func (m *Machine) releaseTranslations(ctx context.Context) (released bool, err error) {
	q, err := m.QMP(ctx)
	if err != nil {
		return false, err
	}
	defer q.Close()
	st, err := queryStatus(ctx, q)
	if err != nil {
		return false, err
	}
	if st != "running" {
		return false, nil
	}
	if err := q.Execute(ctx, ReleaseCommand, nil, nil); err != nil {
		return false, fmt.Errorf("qemu %d %s: %w", m.pid, ReleaseCommand, err)
	}
	return true, nil
}
