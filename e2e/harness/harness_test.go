package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func requireRootAndIP(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, bin := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
}

func TestNetnsIsolatesLoopback(t *testing.T) {
	requireRootAndIP(t)
	ctx := context.Background()
	ns, err := NewNetns(ctx, fmt.Sprintf("husk-harness-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ns.Close(ctx); err != nil {
			t.Error(err)
		}
	}()

	var l net.Listener
	if err := ns.Do(func() error {
		var err error
		l, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatalf("listen inside the namespace: %v", err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := l.Addr().String()

	c, err := ns.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s inside the namespace: %v", addr, err)
	}
	c.Close()

	// The same address from the root namespace must not reach the
	// listener; it is refused unless something else happens to use the
	// port there, which the check below tells apart.
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Logf("port %s is in use in the root namespace too; isolation not checked", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial %s from the root namespace: %v, want connection refused", addr, err)
	}

	// A command started through the namespace sees only its loopback.
	out, err := ns.Command("ip", "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link inside the namespace: %v: %s", err, out)
	}
	if got := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; got != 1 {
		t.Errorf("namespace has %d links, want only lo:\n%s", got, out)
	}
}

func TestProcessesMentioning(t *testing.T) {
	marker := fmt.Sprintf("/husk-harness-marker-%d", os.Getpid())
	// The marker is sleep's argv[0], which /proc/PID/cmdline shows.
	cmd := exec.Command("sleep", "1000")
	cmd.Args[0] = marker
	if err := cmd.Start(); err != nil {
		t.Skipf("needs sleep: %v", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// Scan until the process shows up (a scan raced it once in CI); the
	// bound only keeps a broken scan from looping forever.
	var found []Proc
	for range 200 {
		var err error
		if found, err = ProcessesMentioning(marker); err != nil {
			t.Fatal(err)
		}
		if len(found) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(found) != 1 || found[0].PID != cmd.Process.Pid {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
		t.Errorf("ProcessesMentioning(%q) = %+v, want only pid %d (its cmdline: %q, %v)", marker, found, cmd.Process.Pid, cmdline, err)
	}
}
