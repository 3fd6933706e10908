// Package vmmtest has fakes for tests of vmm.Machine's users.
package vmmtest

import (
	"context"
	"sync"
)

// Process is the lifetime of a fake VMM, for a fake vmm.Machine to
// embed: Kill ends it, once, Wait waits for that, and Cleanup has nothing
// to remove.
type Process struct {
	onKill func()
	once   sync.Once
	done   chan struct{}
}

// NewProcess returns a live Process; onKill, if not nil, runs when it is
// first killed.
func NewProcess(onKill func()) *Process {
	return &Process{onKill: onKill, done: make(chan struct{})}
}

// Kill ends the process; killing it again does nothing.
func (p *Process) Kill() error {
	p.once.Do(func() {
		if p.onKill != nil {
			p.onKill()
		}
		close(p.done)
	})
	return nil
}

// Wait blocks until the process is killed or ctx ends.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cleanup implements vmm.Machine.
func (p *Process) Cleanup() error { return nil }
