package cloudhypervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// ErrHandshake marks a hybrid-vsock peer that answered CONNECT with
// something other than "OK <n>": not a cloud-hypervisor vsock socket, so
// retrying will not help.
var ErrHandshake = errors.New("hybrid vsock handshake")

// maxReplyLine bounds the "OK <n>\n" line; a longer one is garbage.
const maxReplyLine = 64

// DialHybridVsock connects to guest port through cloud-hypervisor's
// hybrid-vsock socket at path: it writes "CONNECT <port>\n" and expects
// "OK <host port>\n", after which the connection is the guest's stream.
//
// cloud-hypervisor closes the connection when nothing listens on the
// guest port yet (the guest is still booting), and a paused or slow guest
// may not answer at all, so each attempt is bounded by attempt and
// attempts repeat, with a growing pause, until ctx ends. A reply that is
// not "OK <n>" ends the dial at once with an error wrapping ErrHandshake.
func DialHybridVsock(ctx context.Context, path string, port uint32, attempt time.Duration) (net.Conn, error) {
	backoff := 20 * time.Millisecond
	var last error
	for {
		c, err := hybridVsockAttempt(ctx, path, port, attempt)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, ErrHandshake) {
			return nil, err
		}
		last = err
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("connect to guest vsock port %d: %w (last attempt: %v)", port, ctx.Err(), last)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func hybridVsockAttempt(ctx context.Context, path string, port uint32, attempt time.Duration) (net.Conn, error) {
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(actx, "unix", path)
	if err != nil {
		return nil, err
	}
	dl, _ := actx.Deadline()
	c.SetDeadline(dl)
	// Closing the connection interrupts the exchange when ctx is
	// cancelled before the deadline.
	stop := context.AfterFunc(actx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := fmt.Fprintf(c, "CONNECT %d\n", port); err != nil {
		c.Close()
		return nil, fmt.Errorf("send CONNECT: %w", err)
	}
	// Read byte by byte: whatever follows the line is the guest's and
	// must stay in the connection.
	line := make([]byte, 0, 16)
	b := make([]byte, 1)
	for {
		n, err := c.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
			if len(line) > maxReplyLine {
				c.Close()
				return nil, fmt.Errorf("%w: reply %q... too long", ErrHandshake, line[:16])
			}
			continue
		}
		if err != nil {
			c.Close()
			if len(line) > 0 {
				return nil, fmt.Errorf("read CONNECT reply after %q: %w", line, err)
			}
			return nil, fmt.Errorf("read CONNECT reply: %w", err)
		}
	}
	f := strings.Fields(string(line))
	if len(f) != 2 || f[0] != "OK" {
		c.Close()
		return nil, fmt.Errorf("%w: CONNECT %d answered %q, want \"OK <port>\"", ErrHandshake, port, line)
	}
	if _, err := strconv.ParseUint(f[1], 10, 32); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: CONNECT %d answered %q, want \"OK <port>\"", ErrHandshake, port, line)
	}
	if !stop() {
		c.Close()
		return nil, fmt.Errorf("connect to guest vsock port %d: %w", port, actx.Err())
	}
	c.SetDeadline(time.Time{})
	return c, nil
}
