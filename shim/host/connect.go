package host

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Guest is what Connect needs of a VM: the channel to its agent, and its
// VMM process, to stop waiting once that is gone.
type Guest interface {
	DialAgent(ctx context.Context) (net.Conn, error)
	// Wait returns nil once the VMM process has exited, or ctx's error.
	Wait(ctx context.Context) error
	PID() int
}

// Connect opens a session with g's agent, dialling again every retry
// while the guest boots, until ctx ends or the VMM exits (a guest that
// panics at boot). One connection gets the whole deadline (the session
// start repeats its hello until the agent is up); only a broken one is
// dialled again, since a per-attempt timeout would never be long enough
// on a loaded host.
func Connect(ctx context.Context, g Guest, retry time.Duration) (*Client, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited := make(chan struct{})
	go func() {
		if g.Wait(ctx) == nil {
			close(exited)
		}
	}()
	var lastErr error
	for {
		client, err := connectOnce(ctx, g)
		if err == nil {
			return client, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("guest agent not ready: %w", lastErr)
		case <-exited:
			return nil, fmt.Errorf("guest agent not ready: the VMM (pid %d) exited: %w", g.PID(), lastErr)
		case <-time.After(retry):
		}
	}
}

func connectOnce(ctx context.Context, g Guest) (*Client, error) {
	conn, err := g.DialAgent(ctx)
	if err != nil {
		return nil, err
	}
	client, err := New(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if _, err := client.Ping(ctx); err != nil {
		client.Close()
		return nil, err
	}
	return client, nil
}
