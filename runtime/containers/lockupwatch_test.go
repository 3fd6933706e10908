package containers

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/husk-vm/husk/runtime/vmm/vmmtest"
	"github.com/moby/moby/api/types/container"
)

// syncBuffer is a log sink a watch writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) count(sub string) int {
	return strings.Count(s.String(), sub)
}

// TestWatchLockupsWhileRunning: a running container's guest that reports
// a soft lockup is described and has its code translated afresh, each
// time; a report from before the run, or one while the container is
// paused, is not acted on; and the watch ends with its run even while
// the container's lock is held elsewhere.
func TestWatchLockupsWhileRunning(t *testing.T) {
	dir := t.TempDir()
	console := filepath.Join(dir, "vm", consoleLog)
	if err := os.MkdirAll(filepath.Dir(console), 0o700); err != nil {
		t.Fatal(err)
	}
	// The boot's own report, dealt with before the run began.
	if err := os.WriteFile(console, []byte(lockupLine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &lockingDriver{t: t, retranslate: true}
	machine := retranslatingMachine{&lockingMachine{d: d, console: console, Process: vmmtest.NewProcess(nil)}}
	var logBuf syncBuffer
	m := &Manager{log: slog.New(slog.NewTextHandler(&logBuf, nil))}
	c := &ctr{m: m, dir: dir, rec: Record{ID: "0123456789abcdef0123", State: container.State{Running: true}}}
	r := &run{machine: machine}
	c.run = r
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := c.watchLockups(ctx, r)

	retranslations := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.retranslations
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s:\n%s", what, logBuf.String())
			}
		}
	}
	described := func(n int) func() bool {
		return func() bool { return logBuf.count("guest kernel reports a soft lockup; what its VMM shows") >= n }
	}

	for i := 1; i <= 2; i++ {
		appendConsole(t, console, lockupLine)
		waitFor("retranslation", func() bool { return retranslations() == i })
		waitFor("warning", func() bool { return logBuf.count("its code was translated afresh") == i })
	}
	if got := logBuf.count("guest kernel reports a soft lockup; what its VMM shows"); got != 2 {
		t.Errorf("%d reports of the VM, want 2", got)
	}

	c.mu.Lock()
	c.rec.State.Paused = true
	c.mu.Unlock()
	appendConsole(t, console, lockupLine)
	waitFor("report while paused", described(3))
	c.mu.Lock()
	c.rec.State.Paused = false
	c.mu.Unlock()

	// A watch waiting for the lock ends with its run.
	c.mu.Lock()
	appendConsole(t, console, lockupLine)
	waitFor("report while locked", described(4))
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the watch did not end with its run while the lock was held")
	}
	c.mu.Unlock()
	if got := retranslations(); got != 2 {
		t.Errorf("%d retranslations, want 2: none while paused or after the run", got)
	}
}

func appendConsole(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}
