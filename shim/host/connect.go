package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	return connect(ctx, g, retry, first, 0, nil)
}

// Reconnect opens a session with an agent that served an earlier host,
// such as the VM of a daemon that was killed, and checks the agent's
// protocol version with a ping. A connection whose session has not
// started within patience is closed and dialled again, with patience
// doubled each time.
//
// Dialling again is what unsticks QEMU's agent channel when its last
// client died while the VM was paused, as a daemon killed mid-checkpoint
// does. While the VM is stopped its virtio-serial port has no chardev
// handlers, so the socket's close never reaches the port, which still
// counts the host as connected. Once the VM runs again, a guest write
// made before the next client connects fails, and the port marks itself
// throttled with nothing left to lift it (QEMU 7.2, hw/char/
// virtio-console.c, flush_buf). The next client's connect does not lift
// it either, so that host's hello reaches the agent but the agent's
// answer never leaves the guest. QEMU's trace events showed exactly that
// sequence in a reattach that timed out. Closing the connection does
// reach the port, now that the VM runs: it lifts the throttle and drops
// what the guest had queued, the agent sees the host go, and the next
// dial starts a clean session. The QEMU driver's Resume of such a VM
// connects before the VM runs, which closes that window; a dial again is
// still needed for a VM that ran on without a client, resumed by hand or
// by a daemon that died after resuming it.
func Reconnect(ctx context.Context, g Guest, patience time.Duration, log *slog.Logger) (*Client, error) {
	return connect(ctx, g, reconnectRetry, ping, patience, log)
}

// reconnectRetry is how soon a dial that failed outright is tried again.
const reconnectRetry = 50 * time.Millisecond

// errNoAnswer is a session that did not start within its patience.
var errNoAnswer = errors.New("the agent did not answer the session start")

func connect(ctx context.Context, g Guest, retry time.Duration, first func(context.Context, *Client) error, patience time.Duration, log *slog.Logger) (*Client, error) {
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
		client, err := connectOnce(ctx, g, first, patience)
		if err == nil {
			return client, nil
		}
		if agentErr := (*AgentError)(nil); errors.As(err, &agentErr) {
			return nil, err
		}
		lastErr = err
		wait := retry
		if errors.Is(err, errNoAnswer) {
			if log != nil {
				log.Debug("dialling the agent again", "pid", g.PID(), "err", err)
			}
			patience *= 2
			wait = 0
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("guest agent not ready: %w", lastErr)
		case <-exited:
			return nil, fmt.Errorf("guest agent not ready: the VMM (pid %d) exited: %w", g.PID(), lastErr)
		case <-time.After(wait):
		}
	}
}

func ping(ctx context.Context, c *Client) error {
	_, err := c.Ping(ctx)
	return err
}

func connectOnce(ctx context.Context, g Guest, first func(context.Context, *Client) error, patience time.Duration) (*Client, error) {
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
	startCtx := ctx
	if patience > 0 {
		var cancel context.CancelFunc
		startCtx, cancel = context.WithTimeout(ctx, patience)
		defer cancel()
	}
	if _, err := client.session(startCtx); err != nil {
		client.Close()
		if ctx.Err() == nil && startCtx.Err() != nil {
			return nil, fmt.Errorf("%w within %s", errNoAnswer, patience)
		}
		return nil, err
	}
	if err := first(ctx, client); err != nil {
		client.Close()
		return nil, err
	}
	return client, nil
}
