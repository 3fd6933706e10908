package qemu

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"
)

// A client on the agent's channel before a stopped VM runs again.
//
// QEMU 7.2's virtio-console takes its chardev's events only while the VM
// runs: a client that leaves while the VM is stopped (a daemon that died
// during a snapshot) is never reported to the port, which still counts
// the host as there. When the VM runs again, the guest's next write
// finds a socket without a client: flush_buf throttles the port and
// cannot add the watch that would lift the throttle (there is no
// connection to watch), and a later client's open event does not lift
// it either. The agent then hears the new host and its answers never
// leave the guest. A restored VM has the same window, between the
// resume and the port's post-load event that tells the guest the host
// is gone: a guest that writes in it (an answer, output it was still
// forwarding at the snapshot) throttles the port for good.
//
// A client that is on the socket when the VM resumes takes those writes,
// so Restore, and Resume of a stopped VM whose channel has no client,
// connect before they resume and keep the connection for the next
// DialAgent. Resume leaves a channel with a client alone: that is a live
// daemon's session, which a second connection would only queue behind.

// agentChardev is the agent channel's chardev id (see args).
const agentChardev = "agent"

// dialAgentEarly connects to the agent's socket and keeps the connection
// for DialAgent. Callers have checked that no client is on it. It returns
// once QEMU has accepted the connection: connect returns when the kernel
// queues it, and a QEMU that reads the caller's next QMP command (cont)
// before it accepts runs the guest without a client, the case above.
func (m *Machine) dialAgentEarly(ctx context.Context, q *QMP) error {
	c, err := m.dialAgentSocket(ctx)
	if err != nil {
		return fmt.Errorf("qemu %d: connect to the agent before resuming: %w", m.pid, err)
	}
	for {
		attended, found, err := agentAttended(ctx, q)
		if err == nil && !found {
			err = fmt.Errorf("no chardev %q", agentChardev)
		}
		if err != nil {
			c.Close()
			return fmt.Errorf("qemu %d: wait for the agent's connection to be accepted: %w", m.pid, err)
		}
		if attended {
			break
		}
		select {
		case <-ctx.Done():
			c.Close()
			return fmt.Errorf("qemu %d: wait for the agent's connection to be accepted: %w", m.pid, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	m.dropEarlyAgent()
	m.mu.Lock()
	m.earlyAgent = c
	m.mu.Unlock()
	return nil
}

// takeEarlyAgent returns the connection dialAgentEarly made, once.
func (m *Machine) takeEarlyAgent() net.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.earlyAgent
	m.earlyAgent = nil
	return c
}

// dropEarlyAgent closes a connection dialAgentEarly made that nobody
// took.
func (m *Machine) dropEarlyAgent() {
	if c := m.takeEarlyAgent(); c != nil {
		c.Close()
	}
}

// agentUnattended says whether a stopped VM's agent channel has no
// client, by QMP's query-chardev. A running VM's port hears its clients
// come and go, so it is never unattended in this sense.
func agentUnattended(ctx context.Context, q *QMP) (bool, error) {
	var st struct {
		Running bool `json:"running"`
	}
	if err := q.Execute(ctx, "query-status", nil, &st); err != nil {
		return false, err
	}
	if st.Running {
		return false, nil
	}
	attended, found, err := agentAttended(ctx, q)
	return found && !attended, err
}

// agentAttended says whether QEMU has a client on the agent's chardev,
// by QMP's query-chardev: a socket chardev without one is named
// "disconnected:...". found is false for a VM without the chardev.
func agentAttended(ctx context.Context, q *QMP) (attended, found bool, err error) {
	var chardevs []struct {
		Label    string `json:"label"`
		Filename string `json:"filename"`
	}
	if err := q.Execute(ctx, "query-chardev", nil, &chardevs); err != nil {
		return false, false, err
	}
	for _, c := range chardevs {
		if c.Label == agentChardev {
			return !strings.HasPrefix(c.Filename, "disconnected:"), true, nil
		}
	}
	return false, false, nil
}
