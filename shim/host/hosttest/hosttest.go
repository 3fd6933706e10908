// Package hosttest is the guest agent's side of a session, for tests of
// the host side (package host and its callers) that need an agent
// without booting a VM. The real agent (shim/agent) needs a guest's
// mounts and cgroups; what a test needs is the session and its framing,
// answered as the test says.
package hosttest

import (
	"bufio"
	"encoding/json"
	"io"
	"net"

	"github.com/hashicorp/yamux"

	"github.com/husk-vm/husk/shim/proto"
)

// Answer is a test agent's reply to one request; ok false closes the
// request's stream unanswered. It runs on a goroutine of its own for each
// request, so it may block, as a wedged guest's agent does.
type Answer func(req proto.Request) (resp proto.Response, ok bool)

// Serve accepts the session a host.Client opens over conn and answers
// each request with answer, until the session ends.
func Serve(conn net.Conn, answer Answer) {
	rest, err := proto.AcceptSession(conn)
	if err != nil {
		return
	}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	sess, err := yamux.Server(readAhead{rest, conn}, cfg)
	if err != nil {
		return
	}
	defer sess.Close()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		go func() {
			defer st.Close()
			line, err := proto.ReadLine(bufio.NewReader(st))
			if err != nil {
				return
			}
			var req proto.Request
			if err := json.Unmarshal(line, &req); err != nil {
				return
			}
			resp, ok := answer(req)
			if !ok {
				return
			}
			b, err := json.Marshal(resp)
			if err != nil {
				return
			}
			_, _ = st.Write(append(b, '\n'))
		}()
	}
}

// readAhead is conn with the bytes the session start read ahead.
type readAhead struct {
	io.Reader
	net.Conn
}

func (r readAhead) Read(p []byte) (int, error) { return r.Reader.Read(p) }
