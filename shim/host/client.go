// Package host is the host side of the husk agent protocol (package proto):
// a yamux client over the VM's agent channel, one stream per request.
//
// A Client lives as long as one session. When the channel breaks (daemon
// restart, snapshot restore) the caller makes a new Client over a new
// connection and picks its processes up again with Client.Process; the agent
// keeps their output and exit status meanwhile.
package host

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/husk-vm/husk/shim/proto"
)

// AgentError is a failure reported by the agent.
type AgentError struct {
	Kind    proto.ErrorKind
	Message string
}

func (e *AgentError) Error() string { return e.Message }

// Client talks to one agent over one session.
type Client struct {
	conn net.Conn
	// life ends when the client is closed; it bounds work the client
	// goes on with after a call returns (Freshen's clock sync).
	life   context.Context
	cancel context.CancelFunc
	ready  chan struct{} // closed once sess or startErr is set
	sess   *yamux.Session
	// startErr is why the session could not start.
	startErr error

	mu    sync.Mutex
	procs map[string]*Process
}

// New starts a session over conn. It returns at once: the session start
// (proto.OpenSession, then yamux) runs in the background, since the agent
// may still be booting, and requests wait for it within their contexts.
func New(conn net.Conn) (*Client, error) {
	nonce, err := sessionNonce()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{conn: conn, life: ctx, cancel: cancel, ready: make(chan struct{}), procs: map[string]*Process{}}
	go c.start(ctx, nonce)
	return c, nil
}

// Park leaves the agent at conn waiting at the start of a session
// (proto.ParkSession), with no session of its own: the state to snapshot a
// VM in when every restore will open a session of its own. It does not
// close conn; closing it before the VM is paused would let the guest see
// the host go.
func Park(ctx context.Context, conn net.Conn) error {
	nonce, err := sessionNonce()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := proto.ParkSession(ctx, conn, nonce); err != nil {
		return fmt.Errorf("park agent: %w", err)
	}
	return nil
}

func sessionNonce() (string, error) {
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("make session nonce: %w", err)
	}
	return hex.EncodeToString(nonce), nil
}

// sessionConn is conn with the bytes the session start read ahead.
type sessionConn struct {
	io.Reader
	net.Conn
}

func (s sessionConn) Read(p []byte) (int, error) { return s.Reader.Read(p) }

func (c *Client) start(ctx context.Context, nonce string) {
	defer close(c.ready)
	rest, err := proto.OpenSession(ctx, c.conn, nonce)
	if err != nil {
		c.startErr = fmt.Errorf("start agent session: %w", err)
		return
	}
	cfg := yamux.DefaultConfig()
	// Keep-alives would declare a paused or snapshotted VM dead; the open
	// timeout would kill the session while the guest is slow.
	cfg.EnableKeepAlive = false
	cfg.StreamOpenTimeout = 0
	cfg.ConnectionWriteTimeout = 2 * time.Minute
	cfg.StreamCloseTimeout = 2 * time.Minute
	cfg.LogOutput = io.Discard
	sess, err := yamux.Client(sessionConn{rest, c.conn}, cfg)
	if err != nil {
		c.startErr = fmt.Errorf("start agent session: %w", err)
		return
	}
	c.sess = sess
}

// session waits for the session to have started.
func (c *Client) session(ctx context.Context) (*yamux.Session, error) {
	select {
	case <-c.ready:
		if c.startErr != nil {
			return nil, c.startErr
		}
		return c.sess, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close ends the session. The agent's processes keep running.
func (c *Client) Close() error {
	c.cancel()
	err := c.conn.Close()
	<-c.ready
	if c.sess != nil {
		c.sess.Close()
	}
	return err
}

// call is one request stream after its first Response.
type call struct {
	st *yamux.Stream
	r  *bufio.Reader
}

func (c *call) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *call) Close() error               { return c.st.Close() }

func (c *call) readResponse() (proto.Response, error) {
	var resp proto.Response
	line, err := proto.ReadLine(c.r)
	if err != nil {
		return resp, fmt.Errorf("read agent response: %w", err)
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		return resp, fmt.Errorf("decode agent response: %w", err)
	}
	return resp, nil
}

// do opens a stream, sends req and reads the first Response. ctx bounds only
// this exchange. A Response carrying an error is returned as *AgentError and
// the stream is closed.
func (c *Client) do(ctx context.Context, req proto.Request) (*call, proto.Response, error) {
	var resp proto.Response
	if err := ctx.Err(); err != nil {
		return nil, resp, err
	}
	sess, err := c.session(ctx)
	if err != nil {
		return nil, resp, fmt.Errorf("agent %s: %w", req.Op, err)
	}
	st, err := sess.OpenStream()
	if err != nil {
		return nil, resp, fmt.Errorf("open agent stream for %s: %w", req.Op, err)
	}
	cl := &call{st: st, r: bufio.NewReaderSize(st, 32<<10)}
	// A deadline in the past unblocks any read or write on the stream.
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	resp, err = cl.exchange(req)
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		st.Close()
		return nil, resp, fmt.Errorf("agent %s: %w", req.Op, err)
	}
	if resp.Error != "" {
		st.Close()
		return nil, resp, &AgentError{Kind: resp.Kind, Message: resp.Error}
	}
	return cl, resp, nil
}

func (c *call) exchange(req proto.Request) (proto.Response, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return proto.Response{}, err
	}
	if _, err := c.st.Write(append(b, '\n')); err != nil {
		return proto.Response{}, fmt.Errorf("send request: %w", err)
	}
	return c.readResponse()
}

// simple runs a request whose stream carries nothing after the Response.
func (c *Client) simple(ctx context.Context, req proto.Request) (proto.Response, error) {
	cl, resp, err := c.do(ctx, req)
	if err != nil {
		return resp, err
	}
	cl.Close()
	return resp, nil
}

// Ping asks the agent who it is. Until the guest has booted it blocks, so
// callers bound it with ctx and retry.
func (c *Client) Ping(ctx context.Context) (proto.AgentInfo, error) {
	resp, err := c.simple(ctx, proto.Request{Op: proto.OpPing})
	if err != nil {
		return proto.AgentInfo{}, err
	}
	if resp.Version != proto.Version {
		return proto.AgentInfo{}, fmt.Errorf("agent speaks protocol version %d, want %d", resp.Version, proto.Version)
	}
	if resp.Info == nil {
		return proto.AgentInfo{}, nil
	}
	return *resp.Info, nil
}

// Setup prepares the container root; once per boot, before Start.
func (c *Client) Setup(ctx context.Context, spec proto.SetupSpec) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpSetup, Setup: &spec})
	return err
}

// Shutdown makes the agent kill its processes, release the disks and power
// the machine off. It returns once the agent has answered.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpShutdown})
	return err
}

// Start runs a process. Its exit status arrives on the start stream, so
// Wait on the returned Process needs no further request while this session
// lasts.
func (c *Client) Start(ctx context.Context, id string, spec proto.ProcessSpec) (*Process, error) {
	cl, resp, err := c.do(ctx, proto.Request{Op: proto.OpStart, ID: id, Process: &spec})
	if err != nil {
		return nil, err
	}
	p := &Process{c: c, id: id, pid: resp.Pid, exited: make(chan struct{})}
	go p.awaitExit(cl)
	c.mu.Lock()
	c.procs[id] = p
	c.mu.Unlock()
	return p, nil
}

// Process returns a handle to a process the agent already runs, typically
// after a new session. Its Pid is 0 until a request on it has been answered.
func (c *Client) Process(id string) *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.procs[id]; ok {
		return p
	}
	p := &Process{c: c, id: id}
	c.procs[id] = p
	return p
}

// Process is a handle to one process in the guest.
type Process struct {
	c  *Client
	id string

	mu  sync.Mutex
	pid int
	// exited is closed when the start stream delivered exit or failed;
	// nil for handles made by Client.Process.
	exited  chan struct{}
	exit    proto.ExitStatus
	exitErr error
}

func (p *Process) setPid(pid int) {
	if pid == 0 {
		return
	}
	p.mu.Lock()
	p.pid = pid
	p.mu.Unlock()
}

// Pid is the process's pid in the guest (0 if not yet known).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

func (p *Process) awaitExit(cl *call) {
	defer cl.Close()
	resp, err := cl.readResponse()
	switch {
	case err != nil:
		p.exitErr = err
	case resp.Error != "":
		p.exitErr = &AgentError{Kind: resp.Kind, Message: resp.Error}
	case resp.Exit == nil:
		p.exitErr = errors.New("agent answered start without an exit status")
	default:
		p.exit = *resp.Exit
	}
	close(p.exited)
}

// Wait returns the exit status once the process has ended.
func (p *Process) Wait(ctx context.Context) (proto.ExitStatus, error) {
	if p.exited != nil {
		select {
		case <-p.exited:
			if p.exitErr == nil {
				return p.exit, nil
			}
			// The start stream broke; ask again on a new stream.
		case <-ctx.Done():
			return proto.ExitStatus{}, ctx.Err()
		}
	}
	cl, resp, err := p.c.do(ctx, proto.Request{Op: proto.OpWait, ID: p.id})
	if err != nil {
		return proto.ExitStatus{}, err
	}
	p.setPid(resp.Pid)
	if resp.Exit != nil {
		cl.Close()
		return *resp.Exit, nil
	}
	// The agent answers a wait only once the process has exited; an
	// answer without a status is a protocol error.
	cl.Close()
	return proto.ExitStatus{}, errors.New("agent answered wait without an exit status")
}

// output is an attached stdout or stderr stream.
type output struct{ *call }

// Stdout attaches to the process's stdout: everything not yet taken by an
// earlier attachment, then what follows, until the process closes it.
// Closing the reader detaches; the agent keeps what it has not sent.
func (p *Process) Stdout(ctx context.Context) (io.ReadCloser, error) {
	return p.attachOutput(ctx, proto.OpStdout)
}

// Stderr is Stdout for stderr.
func (p *Process) Stderr(ctx context.Context) (io.ReadCloser, error) {
	return p.attachOutput(ctx, proto.OpStderr)
}

func (p *Process) attachOutput(ctx context.Context, op proto.Op) (io.ReadCloser, error) {
	cl, err := p.attach(ctx, op, nil)
	if err != nil {
		return nil, err
	}
	return output{cl}, nil
}

// attach opens an output stream of the process as spec says.
func (p *Process) attach(ctx context.Context, op proto.Op, spec *proto.OutputSpec) (*call, error) {
	cl, resp, err := p.c.do(ctx, proto.Request{Op: op, ID: p.id, Output: spec})
	if err != nil {
		return nil, err
	}
	p.setPid(resp.Pid)
	return cl, nil
}

// AckedOutput is an output attachment whose reader acknowledges what it
// has stored: the agent keeps every byte until then, so a host that dies
// between reading and storing loses nothing (the next attachment, with
// resend, is sent it again).
type AckedOutput struct {
	*call
	ack [proto.AckSize]byte
}

// Ack says that total bytes of this attachment are stored. Read and Ack
// may be called from one goroutine only.
func (o *AckedOutput) Ack(total int64) error {
	binary.BigEndian.PutUint64(o.ack[:], uint64(total))
	_, err := o.st.Write(o.ack[:])
	return err
}

// AckedStdout attaches to stdout as Stdout does, acknowledging. With
// resend, bytes an earlier attachment read but never acknowledged come
// again; without, they count as taken.
func (p *Process) AckedStdout(ctx context.Context, resend bool) (*AckedOutput, error) {
	return p.attachAcked(ctx, proto.OpStdout, resend)
}

// AckedStderr is AckedStdout for stderr.
func (p *Process) AckedStderr(ctx context.Context, resend bool) (*AckedOutput, error) {
	return p.attachAcked(ctx, proto.OpStderr, resend)
}

func (p *Process) attachAcked(ctx context.Context, op proto.Op, resend bool) (*AckedOutput, error) {
	cl, err := p.attach(ctx, op, &proto.OutputSpec{Ack: true, Resend: resend})
	if err != nil {
		return nil, err
	}
	return &AckedOutput{call: cl}, nil
}

// Stdin attaches to the process's stdin (started with Stdin set). Closing
// the writer closes the process's stdin.
func (p *Process) Stdin(ctx context.Context) (io.WriteCloser, error) {
	cl, resp, err := p.c.do(ctx, proto.Request{Op: proto.OpStdin, ID: p.id})
	if err != nil {
		return nil, err
	}
	p.setPid(resp.Pid)
	return cl.st, nil
}

// Signal sends sig to the process. Signalling a process that has already
// exited is not an error.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	resp, err := p.c.simple(ctx, proto.Request{Op: proto.OpSignal, ID: p.id, Signal: int(sig)})
	p.setPid(resp.Pid)
	return err
}

// Resize sets the size of the process's terminal.
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	_, err := p.c.simple(ctx, proto.Request{Op: proto.OpResize, ID: p.id, Resize: &proto.WindowSize{Rows: rows, Cols: cols}})
	return err
}

// Forget makes the agent drop an exited process and its status.
func (p *Process) Forget(ctx context.Context) error {
	if _, err := p.c.simple(ctx, proto.Request{Op: proto.OpForget, ID: p.id}); err != nil {
		return err
	}
	p.c.mu.Lock()
	if p.c.procs[p.id] == p {
		delete(p.c.procs, p.id)
	}
	p.c.mu.Unlock()
	return nil
}
