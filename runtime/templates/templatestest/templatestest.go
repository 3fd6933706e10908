// Package templatestest has fakes for tests of templates.Warm's callers.
package templatestest

import (
	"context"
	"errors"
	"os"
	"sync"
)

// Disks is a templates.Disks that makes empty files, or fails when Fail
// is set.
type Disks struct {
	Fail bool

	mu   sync.Mutex
	made []string
}

// NewUpper implements templates.Disks.
func (d *Disks) NewUpper(_ context.Context, path string, _ int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.Fail {
		return errors.New("injected failure")
	}
	d.made = append(d.made, path)
	return os.WriteFile(path, nil, 0o600)
}

// Made lists the paths of the disks made so far.
func (d *Disks) Made() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.made...)
}
