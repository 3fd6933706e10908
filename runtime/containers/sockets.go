package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/husk-vm/husk/shim/host"
)

// A unix socket bind-mounted into a container (-v /var/run/docker.sock:
// /var/run/docker.sock, as testcontainers' Ryuk and every docker-in-docker
// tool does) cannot be a virtio-fs share: the guest would see the socket
// file, but a connect to it reaches no listener. The agent listens at the
// destination instead, and huskd carries each connection to the host
// socket over an agent stream, for as long as the container runs.

// socketTag names the i-th mount's forwarded socket to the agent.
func socketTag(i int) string { return fmt.Sprintf("sock%d", i) }

// forwardSockets serves the run's socket mounts until ctx ends.
func (c *ctr) forwardSockets(ctx context.Context, r *run) *sync.WaitGroup {
	var wg sync.WaitGroup
	c.mu.Lock()
	mounts := slices.Clone(c.rec.Mounts)
	c.mu.Unlock()
	for i, mp := range mounts {
		if !mp.Socket {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.forwardSocket(ctx, r.client, socketTag(i), mp.Source)
		}()
	}
	return &wg
}

// forwardSocket keeps one agent stream waiting for the next connection to
// the socket mount tag, and joins each connection that comes to a new one
// to hostPath.
func (c *ctr) forwardSocket(ctx context.Context, client *host.Client, tag, hostPath string) {
	log := c.m.log.With("id", c.rec.ID[:12], "socket", hostPath)
	var conns sync.WaitGroup
	defer conns.Wait()
	for ctx.Err() == nil {
		guest, err := client.SocketConnect(ctx, tag)
		if err != nil {
			var ae *host.AgentError
			if ctx.Err() == nil && errors.As(err, &ae) {
				log.Warn("socket forwarding stopped", "err", err)
			} else {
				// The run is ending, or its agent session with it.
				log.Debug("socket forwarding stopped", "err", err)
			}
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			defer guest.Close()
			var d net.Dialer
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			conn, err := d.DialContext(dctx, "unix", hostPath)
			cancel()
			if err != nil {
				// The container sees its connection end at once.
				log.Warn("connect to the host socket", "err", err)
				return
			}
			hostConn := conn.(*net.UnixConn)
			defer hostConn.Close()
			stop := context.AfterFunc(ctx, func() { hostConn.Close(); guest.Close() })
			defer stop()
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = io.Copy(guest, hostConn)
				_ = guest.CloseWrite()
			}()
			_, _ = io.Copy(hostConn, guest)
			_ = hostConn.CloseWrite()
			<-done
		}()
	}
}
