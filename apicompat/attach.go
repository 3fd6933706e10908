package apicompat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/runtime/containers"
)

// closeGrace bounds how long a finished attach waits for the client to
// close its side after the server closed its own, before closing the
// connection outright. Closing a unix socket while the peer's data is
// still unread makes the peer's reads fail with ECONNRESET, which could
// cost the client the tail of the output; a well-behaved client closes as
// soon as it reads EOF.
const closeGrace = 10 * time.Second

// attachContainer is POST /containers/{name}/attach: the connection is
// hijacked and carries stdin from the client and the output back, framed
// with stdcopy unless the container has a TTY.
func (s *server) attachContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	name := vars["name"]
	tty, opts, err := s.attachRequest(ctx, r, name)
	if err != nil {
		return err
	}
	h, err := s.hijack(ctx, w, r, tty, boolValue(r, "stdin"))
	if err != nil {
		return fmt.Errorf("error attaching to container %s, hijack connection missing: %w", name, err)
	}
	if h == nil {
		s.log.Debug("attach: client went away before the answer", "container", name)
		return nil
	}
	defer h.finish()
	if boolValue(r, "stdout") {
		opts.Stdout = h.stdout
	}
	if boolValue(r, "stderr") {
		opts.Stderr = h.stderr
	}
	if h.stdin != nil {
		opts.Stdin = h.stdin
	}
	if err := s.cfg.Containers.Attach(h.ctx, name, opts); err != nil && h.ctx.Err() == nil {
		s.log.Error("attach failed", "container", name, "error", err)
		fmt.Fprintln(h.stdout, "Error attaching:", err)
	}
	return nil
}

// attachRequest checks what every attach (hijacked or WebSocket) checks
// before the connection is taken over, so that its errors are ordinary
// HTTP ones: the container ("No such container") and the detach keys. It
// returns whether the container has a TTY, and the options the query
// asks for, streams not yet set.
func (s *server) attachRequest(ctx context.Context, r *http.Request, name string) (tty bool, opts AttachOptions, err error) {
	if err := parseForm(r); err != nil {
		return false, AttachOptions{}, err
	}
	ctr, err := s.cfg.Containers.Inspect(ctx, name)
	if err != nil {
		return false, AttachOptions{}, err
	}
	if _, err := containers.ParseDetachKeys(r.Form.Get("detachKeys")); err != nil {
		return false, AttachOptions{}, err
	}
	return ctr.Config != nil && ctr.Config.Tty, AttachOptions{
		Logs:       boolValue(r, "logs"),
		Stream:     boolValue(r, "stream"),
		DetachKeys: r.Form.Get("detachKeys"),
	}, nil
}

// hijacked is a connection taken over from net/http for a bidirectional
// stream (attach, exec start): output goes back framed with stdcopy unless
// there is a TTY, and the client's input feeds stdin.
type hijacked struct {
	conn           net.Conn
	stdout, stderr io.Writer
	// stdin is the client's input; nil unless asked for.
	stdin *io.PipeReader
	// ctx lives as long as the client: it ends when the client hangs up.
	ctx        context.Context
	cancel     context.CancelFunc
	clientDone chan struct{}
	stopWatch  func()
}

// hijack takes the connection over and writes dockerd's answer head. It
// returns nil and no error when the client went away before the head.
func (s *server) hijack(ctx context.Context, w http.ResponseWriter, r *http.Request, tty, withStdin bool) (*hijacked, error) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, err
	}

	// The answer dockerd writes by hand on the hijacked connection. Without
	// an Upgrade header it says raw-stream even when the frames are
	// multiplexed; old clients know from the TTY setting.
	contentType := types.MediaTypeRawStream
	var head string
	if _, upgrade := r.Header["Upgrade"]; upgrade {
		if !tty && !versionLess(apiVersion(ctx), "1.42") {
			contentType = types.MediaTypeMultiplexedStream
		}
		head = fmt.Sprintf("HTTP/1.1 101 UPGRADED\r\nContent-Type: %s\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n", contentType)
	} else {
		head = "HTTP/1.1 200 OK\r\nContent-Type: " + types.MediaTypeRawStream + "\r\n\r\n"
	}
	if _, err := io.WriteString(conn, head); err != nil {
		conn.Close()
		return nil, nil
	}

	h := &hijacked{conn: conn, clientDone: make(chan struct{})}
	var mu sync.Mutex
	h.stdout, h.stderr = lockedWriter{mu: &mu, w: conn}, lockedWriter{mu: &mu, w: conn}
	if !tty {
		h.stdout = muxWriter{mu: &mu, w: conn, stream: stdcopy.Stdout}
		h.stderr = muxWriter{mu: &mu, w: conn, stream: stdcopy.Stderr}
	}

	// One goroutine owns the read side for the whole stream: it feeds stdin
	// while the backend wants it, then keeps reading until the client
	// closes, so that the end of the stream can tell when that happened.
	var stdinW *io.PipeWriter
	if withStdin {
		h.stdin, stdinW = io.Pipe()
	}
	// What the client sent right behind the request head (stdin typed
	// early) sits in net/http's buffer; after it, the connection is read
	// directly. Reading on through net/http's reader would cancel the
	// request's context at the client's half-close.
	early, err := brw.Reader.Peek(brw.Reader.Buffered())
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("read buffered input: %w", err)
	}
	fromClient := io.MultiReader(bytes.NewReader(bytes.Clone(early)), conn)
	go func() {
		defer close(h.clientDone)
		readClient(fromClient, stdinW)
	}()

	// The stream lives as long as the process or the client, not as long
	// as net/http's request: a client that goes away entirely ends it,
	// even when the process is silent and no write would fail (dockerd's
	// notifyClosed).
	h.ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	h.stopWatch = watchHangup(conn, h.cancel)
	return h, nil
}

// finish ends the stream: the client reads EOF after the last output and
// closes its side, or is cut off after closeGrace.
func (h *hijacked) finish() {
	defer h.cancel()
	if h.stdin != nil {
		// Unblocks the copy into a stdin the backend no longer reads.
		h.stdin.Close()
	}
	if cw, ok := h.conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		timer := time.NewTimer(closeGrace)
		defer timer.Stop()
		select {
		case <-h.clientDone:
		case <-timer.C:
		}
	}
	// Before conn.Close, which would otherwise wait for the watch to let go
	// of the descriptor.
	h.stopWatch()
	h.conn.Close()
	<-h.clientDone
}

// watchHangup calls onHangup once the peer has closed conn in both
// directions. A half-close (the end of stdin) is not a hangup. The watch
// holds a reference to conn's descriptor, so stop must be called before
// conn is closed.
func watchHangup(conn net.Conn, onHangup func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	wakeR, wakeW, err := os.Pipe()
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer wakeR.Close()
		_ = rc.Control(func(fd uintptr) {
			// No events requested: poll reports POLLHUP and POLLERR
			// regardless, and the wake pipe reports its writer closing.
			fds := []unix.PollFd{{Fd: int32(fd)}, {Fd: int32(wakeR.Fd()), Events: unix.POLLIN}}
			for {
				if _, err := unix.Poll(fds, -1); err != nil {
					if errors.Is(err, unix.EINTR) {
						continue
					}
					return
				}
				if fds[1].Revents != 0 || fds[0].Revents&unix.POLLNVAL != 0 {
					return
				}
				if fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
					onHangup()
					return
				}
			}
		})
	}()
	return func() {
		// Closing twice is harmless: the second Close only errs.
		_ = wakeW.Close()
		<-done
	}
}

// readClient copies what the client sends into stdin (when attached) until
// the client half-closes, which ends stdin, then drains the connection
// until the client is gone.
func readClient(r io.Reader, stdin *io.PipeWriter) {
	if stdin != nil {
		_, err := io.Copy(stdin, r)
		// err is nil at the client's EOF; either way stdin has ended.
		stdin.CloseWithError(err)
		if err != nil && !errors.Is(err, io.ErrClosedPipe) {
			return
		}
	}
	_, _ = io.Copy(io.Discard, r)
}
