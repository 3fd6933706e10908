package host

import (
	"context"
	"errors"
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
	return ConnectWith(ctx, g, retry, ping)
}

// ConnectWith is Connect with first as the session's first request in
// place of Connect's ping. Boots and restores, which must set the guest's
// clock before anything else, send that refresh as first: under TCG each
// host↔guest round trip of a fresh guest costs it tens of milliseconds.
// An error the agent answers with is returned at once; only a session
// that could not be had is tried again. Only Connect's ping checks the
// agent's protocol version: ConnectWith is for agents the caller put in
// the guest itself (its own initramfs, a checkpoint made under it), not
// for VMs an older daemon started.
func ConnectWith(ctx context.Context, g Guest, retry time.Duration, first func(context.Context, *Client) error) (*Client, error) {
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
		client, err := connectOnce(ctx, g, first)
		if err == nil {
			return client, nil
		}
		if agentErr := (*AgentError)(nil); errors.As(err, &agentErr) {
			return nil, err
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

func ping(ctx context.Context, c *Client) error {
	_, err := c.Ping(ctx)
	return err
}

func connectOnce(ctx context.Context, g Guest, first func(context.Context, *Client) error) (*Client, error) {
	conn, err := g.DialAgent(ctx)
	if err != nil {
		return nil, err
	}
	client, err := New(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	// First only once the session is up: a refresh carries the host's
	// clock, which must not be read before a waking guest answers.
	if _, err := client.session(ctx); err != nil {
		client.Close()
		return nil, err
	}
	if err := first(ctx, client); err != nil {
		client.Close()
		return nil, err
	}
	return client, nil
}
