package network

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The runtime parks, rather than ends, the main thread when a goroutine
// locked to it exits; locking it to the main goroutine keeps testNetns.do
// from ever leaving the test binary's main thread in a test namespace.
func init() { runtime.LockOSThread() }

// testNetns is a network namespace made for one test with `ip netns add`;
// nothing a test here does to links or rules ever touches another one.
type testNetns struct {
	name string
	path string
}

// newTestNetns creates a namespace and deletes it when the test ends; the
// test is skipped without root or ip(8).
func newTestNetns(t *testing.T) *testNetns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) (iproute2) to create a network namespace")
	}
	name := fmt.Sprintf("husk-nt-%d-%d", os.Getpid(), len(t.Name()))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return &testNetns{name: name, path: "/var/run/netns/" + name}
}

// do runs fn on a thread inside the namespace. The thread is not returned
// to the pool afterwards (it exits with the goroutine), so no other code
// ever runs in the test namespace by accident.
func (n *testNetns) do(t *testing.T, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(n.path)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", n.name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// ip runs ip(8) inside the namespace and returns its output.
func (n *testNetns) ip(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", n.name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s %v: %v: %s", n.name, args, err, out)
	}
	return string(out)
}
