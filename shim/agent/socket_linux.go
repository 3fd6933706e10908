//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// socketListener is a MountSocket mount's listening socket. Connections
// wait in the kernel's backlog until an OpSocketConnect stream takes
// them, so none is lost while the host has no stream waiting (between
// two sessions, say).
type socketListener struct {
	ln    *net.UnixListener
	conns chan *net.UnixConn
	done  chan struct{}
	once  sync.Once
}

func (l *socketListener) acceptLoop() {
	defer close(l.conns)
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			return
		}
		select {
		case l.conns <- c:
		case <-l.done:
			c.Close()
			return
		}
	}
}

func (l *socketListener) close() {
	l.once.Do(func() {
		close(l.done)
		l.ln.Close()
	})
}

// applySocket listens on a socket in sharesDir and binds it onto the
// target, created as an empty file inside the root when missing.
func (m *mounter) applySocket(rootfd int, spec proto.MountSpec) error {
	if spec.Tag == "" || strings.ContainsAny(spec.Tag, "/\x00") {
		return fmt.Errorf("bad socket tag %q", spec.Tag)
	}
	if _, dup := m.sockets[spec.Tag]; dup {
		return fmt.Errorf("socket tag %q used twice", spec.Tag)
	}
	if err := os.MkdirAll(m.sharesDir, 0o755); err != nil {
		return err
	}
	src := filepath.Join(m.sharesDir, spec.Tag+".sock")
	if err := os.Remove(src); err != nil && !os.IsNotExist(err) {
		return err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: src, Net: "unix"})
	if err != nil {
		return err
	}
	// The container's users reach it as they would the host's socket
	// through a bind mount, which root can always connect to.
	if err := os.Chmod(src, 0o660); err != nil {
		ln.Close()
		return err
	}
	l := &socketListener{ln: ln, conns: make(chan *net.UnixConn), done: make(chan struct{})}
	target, err := openInRoot(rootfd, spec.Target, true)
	if err != nil {
		l.close()
		return err
	}
	defer unix.Close(target)
	where, err := os.Readlink(fdPath(target))
	if err != nil {
		l.close()
		return err
	}
	if err := unix.Mount(src, fdPath(target), "", unix.MS_BIND, ""); err != nil {
		l.close()
		return err
	}
	m.mounted = append(m.mounted, where)
	if m.sockets == nil {
		m.sockets = map[string]*socketListener{}
	}
	m.sockets[spec.Tag] = l
	go l.acceptLoop()
	return nil
}

// socketConnect serves OpSocketConnect: it waits for a connection to the
// socket tag names, answers, and then carries bytes both ways until both
// sides are done. A host that goes away while it waits ends the stream,
// which the wait notices by a read that fails.
func (a *Agent) socketConnect(ctx context.Context, s *stream, tag string) error {
	a.mu.Lock()
	var l *socketListener
	if a.mounts != nil {
		l = a.mounts.sockets[tag]
	}
	a.mu.Unlock()
	if l == nil {
		return &agentError{proto.KindNotFound, "no socket mount " + tag}
	}
	// The host writes nothing before the answer: a read returning means
	// it closed the stream (or, after the answer, that data has come).
	readable := make(chan error, 1)
	go func() {
		_, err := s.r.Peek(1)
		readable <- err
	}()
	var conn *net.UnixConn
	select {
	case c, ok := <-l.conns:
		if !ok {
			return &agentError{proto.KindNotFound, "socket mount " + tag + " is closed"}
		}
		conn = c
	case err := <-readable:
		return fmt.Errorf("socket %s: the host left while waiting: %w", tag, err)
	case <-ctx.Done():
		return ctx.Err()
	}
	defer conn.Close()
	if err := s.respond(proto.Response{}); err != nil {
		return nil
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(s.Conn, conn)
		// A yamux Close only ends our side: the host can still send.
		_ = s.Conn.Close()
	}()
	if err := <-readable; err == nil || errors.Is(err, io.EOF) {
		_, _ = io.Copy(conn, s.r)
	}
	_ = conn.CloseWrite()
	wg.Wait()
	return nil
}
