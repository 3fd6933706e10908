package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/e2e/harness"
)

// referenceLockWait bounds how long the supervisor waits for another
// dockerd run to finish before the differential test gives up on its
// reference side.
const referenceLockWait = 5 * time.Minute

// reference is a second daemon, Debian's dockerd, that the supervisor
// starts on request next to huskd: same namespace, same registry, same
// images, so that one test process can run the same CLI scenarios against
// both (TestDifferential).
type reference struct {
	daemon *harness.Daemon
	lock   *os.File
	err    error // why it could not start; then it is not retried
}

// referenceHost is the reference dockerd's host for t, or why there is
// none. A run with the reference off fails t instead: a test that holds
// huskd to dockerd must not lose its reference without a word.
func referenceHost(t *testing.T) (string, error) {
	t.Helper()
	host, err := control.query("reference")
	if err != nil && os.Getenv(referenceEnv) == "off" {
		t.Fatal(err)
	}
	return host, err
}

// startReference starts the reference dockerd once and returns its
// DOCKER_HOST.
func (w *world) startReference(ctx context.Context) (string, error) {
	if w.ref != nil {
		if w.ref.err != nil {
			return "", w.ref.err
		}
		return w.ref.daemon.Host(), nil
	}
	w.ref = &reference{}
	if os.Getenv(referenceEnv) == "off" {
		w.ref.err = fmt.Errorf("this run has no reference dockerd (%s=off): add the test to the Makefile's E2E_REFERENCE_TESTS, which run beside the others with one", referenceEnv)
		return "", w.ref.err
	}
	w.ref.err = w.ref.start(ctx, w)
	if w.ref.err != nil {
		return "", w.ref.err
	}
	return w.ref.daemon.Host(), nil
}

func (r *reference) start(ctx context.Context, w *world) error {
	if w.kind != harness.Huskd {
		return fmt.Errorf("the daemon under test is %s, not huskd", w.kind)
	}
	for _, n := range []string{"dockerd", "containerd", "runc"} {
		if _, err := exec.LookPath(n); err != nil {
			return fmt.Errorf("%s is not installed (apt-get install docker.io): %w", n, err)
		}
	}
	// The machine-wide dockerd lock (see dockerdLock), polled so that a
	// long wait ends in a message rather than a hang.
	lock, err := os.OpenFile(dockerdLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", dockerdLock, err)
	}
	lctx, cancel := context.WithTimeout(ctx, referenceLockWait)
	defer cancel()
	for {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			lock.Close()
			return fmt.Errorf("lock %s: %w", dockerdLock, err)
		}
		select {
		case <-lctx.Done():
			lock.Close()
			return fmt.Errorf("another dockerd held %s for %v", dockerdLock, referenceLockWait)
		case <-time.After(time.Second):
		}
	}
	r.lock = lock
	dctx, cancel := context.WithTimeout(ctx, daemonTimeout)
	defer cancel()
	r.daemon, err = harness.StartDaemon(dctx, w.ns, harness.DaemonConfig{
		Kind:               harness.Dockerd,
		Dir:                filepath.Join(w.tmp, "ref"),
		InsecureRegistries: []string{w.registry.Host},
		DockerCLI:          w.state.DockerCLI,
	})
	if err != nil {
		r.unlock()
		return fmt.Errorf("start the reference dockerd: %w", err)
	}
	fmt.Fprintf(os.Stderr, "e2e: reference dockerd at %s (log %s)\n", r.daemon.Host(), r.daemon.LogPath())
	return nil
}

func (r *reference) unlock() {
	if r.lock != nil {
		r.lock.Close() // closing the only descriptor releases the flock
		r.lock = nil
	}
}

// stop stops the reference dockerd, kills and reports anything it left
// behind, and releases the lock.
func (r *reference) stop(ctx context.Context) []error {
	if r == nil || r.daemon == nil {
		if r != nil {
			r.unlock()
		}
		return nil
	}
	defer r.unlock()
	var errs []error
	if err := r.daemon.Stop(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop the reference dockerd: %w", err))
	}
	left, err := r.daemon.Leftovers()
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range left {
		errs = append(errs, fmt.Errorf("the reference dockerd left pid %d running: %s", p.PID, p.Cmdline))
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	return errs
}
