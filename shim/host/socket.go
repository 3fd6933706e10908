package host

import (
	"context"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// SocketConn is a connection a container process made to a MountSocket
// mount, carried over one agent stream.
type SocketConn struct{ cl *call }

func (s *SocketConn) Read(p []byte) (int, error)  { return s.cl.Read(p) }
func (s *SocketConn) Write(p []byte) (int, error) { return s.cl.st.Write(p) }

// CloseWrite ends what the host sends; the container process reads EOF
// and can still answer. A yamux stream's Close only ends the local side.
func (s *SocketConn) CloseWrite() error { return s.cl.st.Close() }

// Close ends the stream both ways: a deadline in the past unblocks a read
// still waiting for the guest.
func (s *SocketConn) Close() error {
	err := s.cl.st.Close()
	_ = s.cl.st.SetDeadline(time.Unix(1, 0))
	return err
}

// SocketConnect waits for a container process to connect to the socket
// mount tag and returns that connection. It blocks until one does, ctx
// ends, or the session does.
func (c *Client) SocketConnect(ctx context.Context, tag string) (*SocketConn, error) {
	cl, _, err := c.do(ctx, proto.Request{Op: proto.OpSocketConnect, ID: tag})
	if err != nil {
		return nil, err
	}
	return &SocketConn{cl: cl}, nil
}
