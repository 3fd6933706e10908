package qemu

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestResumeAfterHostLeftWhileStopped is a daemon that died while its VM
// was stopped for a snapshot: QEMU's port never hears that the client
// left. A second driver reattaches and resumes the VM while the guest
// writes lines nobody asked for; the next connection must still get the
// guest's answers. Without a client on the channel before the resume,
// the guest's first line throttles the port for good.
func TestResumeAfterHostLeftWhileStopped(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := vmConfig(t, env, "host-left")
	m := startCounting(t, ctx, New(Options{Binary: env.qemu}), cfg)

	c, err := m.DialAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := exchange(ctx, c, "chatter"); err != nil || r != "chattering" {
		t.Fatalf("chatter: %q, %v", r, err)
	}
	if err := m.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitAgentDisconnected(t, ctx, m.(*Machine))

	m2, err := New(Options{Binary: env.qemu}).Reattach(ctx, cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	// Time for the guest to write a few lines before anyone dials.
	time.Sleep(500 * time.Millisecond)
	c2, err := m2.DialAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := awaitLine(ctx, c2, "ping", "pong", 20*time.Second); err != nil {
		t.Fatalf("after the resume: %v\nconsole:\n%s", err, readFile(cfg.Dir, consoleLog))
	}
}

// waitAgentDisconnected waits until QEMU's socket chardev has no client.
func waitAgentDisconnected(t *testing.T, ctx context.Context, m *Machine) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		q, err := m.QMP(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gone, err := agentUnattended(ctx, q)
		q.Close()
		if err != nil {
			t.Fatal(err)
		}
		if gone {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("QEMU still counts the closed agent connection")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitLine sends line and reads until want, skipping the guest's other
// lines, for at most patience.
func awaitLine(ctx context.Context, c net.Conn, line, want string, patience time.Duration) error {
	dl := time.Now().Add(patience)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	c.SetDeadline(dl)
	if _, err := fmt.Fprintln(c, line); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	var skipped int
	for {
		got, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("no %q after %d other lines: %w", want, skipped, err)
		}
		if strings.TrimSpace(got) == want {
			return nil
		}
		skipped++
	}
}
