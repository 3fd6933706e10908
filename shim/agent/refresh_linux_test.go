package agent_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

type fakeRefresher struct {
	mu      sync.Mutex
	clock   time.Time
	entropy []byte
	fail    error
}

func (f *fakeRefresher) SetClock(t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock = t
	return f.fail
}

func (f *fakeRefresher) Reseed(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entropy = append([]byte(nil), b...)
	return nil
}

func refreshClient(t *testing.T, r agent.Refresher) *host.Client {
	t.Helper()
	a, err := agent.New(agent.Options{Rootfs: agent.DirRootfs(t.TempDir()), StateDir: t.TempDir(), Refresher: r})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	hostEnd, agentEnd := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- a.ServeConn(context.Background(), agentEnd) }()
	c, err := host.New(hostEnd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		hostEnd.Close()
		<-done
	})
	return c
}

func TestRefresh(t *testing.T) {
	f := &fakeRefresher{}
	c := refreshClient(t, f)
	when := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	entropy := bytes.Repeat([]byte{7}, 32)
	if err := c.Refresh(ctx(t), proto.RefreshSpec{TimeUnixNano: when.UnixNano(), Entropy: entropy}); err != nil {
		t.Fatal(err)
	}
	if !f.clock.Equal(when) || !bytes.Equal(f.entropy, entropy) {
		t.Errorf("clock %v entropy %x, want %v and %x", f.clock, f.entropy, when, entropy)
	}

	f.fail = errors.New("clock is read-only")
	err := c.Refresh(ctx(t), proto.RefreshSpec{TimeUnixNano: 1})
	if err == nil || err.Error() != "clock is read-only" {
		t.Errorf("failing refresh: %v", err)
	}
}

func TestRefreshWithoutRefresher(t *testing.T) {
	c := refreshClient(t, nil)
	var ae *host.AgentError
	if err := c.Refresh(ctx(t), proto.RefreshSpec{TimeUnixNano: 1}); !errors.As(err, &ae) || ae.Kind != proto.KindInvalid {
		t.Errorf("refresh without a refresher: %v, want an invalid-request agent error", err)
	}
}
