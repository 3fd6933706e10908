package kernel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSoftLockup(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		// What the hung boot of a stress run printed (bench/README.md).
		{"[   28.113862] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [swapper/0:1]", true},
		{"watchdog: BUG: soft lockup - CPU#1 stuck for 52s! [kworker/1:1:33]", true},
		{"[    0.210000] NMI watchdog: Perf NMI watchdog permanently disabled", false},
		{"rcu: INFO: rcu_sched self-detected stall on CPU", false},
		{"", false},
	} {
		if got := SoftLockup(tc.line); got != tc.want {
			t.Errorf("SoftLockup(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}

// TestWatchLockup follows a console as a guest writes it: a file that is
// not there yet, a line written in two pieces, and a file truncated by
// the next VMM.
func TestWatchLockup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	type result struct {
		line string
		err  error
	}
	watch := func(ctx context.Context) chan result {
		done := make(chan result, 1)
		go func() {
			line, err := WatchLockup(ctx, path, 0, time.Millisecond)
			done <- result{line, err}
		}()
		return done
	}
	const lockup = "[   28.113862] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [swapper/0:1]"

	done := watch(context.Background())
	time.Sleep(5 * time.Millisecond)
	appendFile(t, path, "[    0.000000] Linux version 6.1.0\n[    1.2] watchdog: BUG: soft")
	select {
	case r := <-done:
		t.Fatalf("WatchLockup returned on half a line: %q, %v", r.line, r.err)
	case <-time.After(20 * time.Millisecond):
	}
	appendFile(t, path, " lockup - CPU#0 stuck for 26s! [swapper/0:1]\r\nmore\n")
	if r := <-done; r.err != nil || r.line != "[    1.2] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [swapper/0:1]" {
		t.Errorf("WatchLockup = %q, %v; want the joined line", r.line, r.err)
	}

	// A new VMM truncates the console; the watch reads it from its start.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := os.WriteFile(path, make([]byte, 1<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	done = watch(ctx)
	time.Sleep(5 * time.Millisecond)
	if err := os.WriteFile(path, []byte(lockup+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.line != lockup {
		t.Errorf("after a truncation WatchLockup = %q, %v; want %q", r.line, r.err, lockup)
	}

	// A console without a lockup is watched until the context ends.
	if err := os.WriteFile(path, []byte("quiet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	done = watch(ctx)
	cancel()
	if r := <-done; !errors.Is(r.err, context.Canceled) || r.line != "" {
		t.Errorf("cancelled WatchLockup = %q, %v; want context.Canceled", r.line, r.err)
	}
}

// TestWatchBoot: the context WatchBootFrom gives is cancelled with the
// lockup as its cause once the console reports one, and stop ends a
// watch that saw none.
func TestWatchBoot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	ctx, stop := WatchBootFrom(context.Background(), path, 0)
	if err := os.WriteFile(path, []byte("[   24.481263] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [swapper/0:0]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	if lockup := LockedUp(ctx); lockup == nil || lockup.Line != "[   24.481263] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [swapper/0:0]" {
		t.Errorf("LockedUp = %v (cause %v), want the lockup", lockup, context.Cause(ctx))
	}
	stop()

	// Past the first report, only a later one ends the watch.
	size := fileSize(t, path)
	ctx, stop = WatchBootFrom(context.Background(), path, size)
	time.Sleep(3 * lockupInterval)
	if ctx.Err() != nil {
		t.Fatalf("WatchBootFrom past the report ended: %v", context.Cause(ctx))
	}
	const again = "[   48.481263] watchdog: BUG: soft lockup - CPU#0 stuck for 44s! [swapper/0:0]"
	appendFile(t, path, again+"\n")
	<-ctx.Done()
	if lockup := LockedUp(ctx); lockup == nil || lockup.Line != again {
		t.Errorf("LockedUp past the first report = %v (cause %v), want the second", lockup, context.Cause(ctx))
	}
	stop()

	ctx, stop = WatchBootFrom(context.Background(), filepath.Join(t.TempDir(), "console.log"), 0)
	stop()
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) || LockedUp(ctx) != nil {
		t.Errorf("cause after stop = %v, want context.Canceled", cause)
	}
}

// appendFile writes s at the end of the file at path, as a guest's
// console grows.
func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
