package host

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/husk-vm/husk/shim/host/hosttest"
	"github.com/husk-vm/husk/shim/proto"
)

// goneGuest is a VM whose VMM has exited: its agent cannot be dialled.
type goneGuest struct{}

func (goneGuest) PID() int { return 42 }
func (goneGuest) DialAgent(context.Context) (net.Conn, error) {
	return nil, errors.New("dial agent: qemu 42 has exited")
}
func (goneGuest) Wait(context.Context) error { return nil }

// TestConnectStopsWhenTheVMMExits: a guest that dies while booting (a
// kernel panic, too little memory) fails the start at once, not at the
// end of the ready timeout.
func TestConnectStopsWhenTheVMMExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err := Connect(ctx, goneGuest{}, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "the VMM (pid 42) exited") {
		t.Fatalf("Connect to an exited VMM: %v, want an error saying it exited", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Connect waited for its deadline")
	}
}

// stuckGuest's agent channel takes the first deaf dials' bytes and never
// answers, as QEMU's does while its port is left throttled; later dials
// reach an agent that answers a ping.
type stuckGuest struct {
	t    *testing.T
	deaf int

	mu    sync.Mutex
	dials int
}

func (g *stuckGuest) PID() int                       { return 7 }
func (g *stuckGuest) Wait(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

func (g *stuckGuest) DialAgent(context.Context) (net.Conn, error) {
	g.mu.Lock()
	g.dials++
	deaf := g.dials <= g.deaf
	g.mu.Unlock()
	hostEnd, guestEnd := net.Pipe()
	g.t.Cleanup(func() { guestEnd.Close() })
	if deaf {
		go func() { _, _ = io.Copy(io.Discard, guestEnd) }()
	} else {
		go pingAnswerer(guestEnd)
	}
	return hostEnd, nil
}

func (g *stuckGuest) dialled() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dials
}

// pingAnswerer is the agent's side of a session that answers pings.
func pingAnswerer(conn net.Conn) {
	hosttest.Serve(conn, func(proto.Request) (proto.Response, bool) {
		return proto.Response{Version: proto.Version}, true
	})
}

// TestReconnectDialsAgainWhenUnanswered: a reattach whose agent channel
// swallows the hello dials again, with more patience each time, and gets
// its session; Connect, which gives one connection the whole deadline,
// stays on the deaf one.
func TestReconnectDialsAgainWhenUnanswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := &stuckGuest{t: t, deaf: 2}
	c, err := Reconnect(ctx, g, 100*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("Reconnect: %v", err)
	}
	c.Close()
	if got := g.dialled(); got != 3 {
		t.Errorf("Reconnect dialled %d times, want 3 (two deaf, one answering)", got)
	}

	short, cancelShort := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancelShort()
	g = &stuckGuest{t: t, deaf: 1}
	if c, err := Connect(short, g, 10*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("Connect got a session through a deaf channel")
	}
	if got := g.dialled(); got != 1 {
		t.Errorf("Connect dialled %d times, want 1", got)
	}
}
