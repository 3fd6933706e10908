//go:build linux

package agent

import (
	"context"
	"errors"
	"io"
	"sync"
)

// AnyListener serves whichever host channel the VMM provides: under QEMU
// the virtio-serial port, under cloud-hypervisor a vsock port. Each
// underlying listener is asked for its next session only once its
// previous session is closed (a serial port carries one session at a
// time), and sessions from all of them come out of Accept in the order
// they arrive. Accept fails only once every listener has failed.
type AnyListener struct {
	listeners []Listener

	start sync.Once
	ch    chan accepted

	mu     sync.Mutex
	failed []error
}

type accepted struct {
	conn io.ReadWriteCloser
	err  error
}

// NewAnyListener merges ls.
func NewAnyListener(ls ...Listener) *AnyListener {
	return &AnyListener{listeners: ls, ch: make(chan accepted)}
}

// Accept returns the next session from any listener. The listeners run
// under the ctx of the first call, as Agent.Serve passes the same one to
// every call.
func (a *AnyListener) Accept(ctx context.Context) (io.ReadWriteCloser, error) {
	a.start.Do(func() {
		for _, l := range a.listeners {
			go a.run(ctx, l)
		}
	})
	for {
		a.mu.Lock()
		if len(a.failed) == len(a.listeners) {
			err := errors.Join(a.failed...)
			a.mu.Unlock()
			if err == nil {
				err = errors.New("no host channel to listen on")
			}
			return nil, err
		}
		a.mu.Unlock()
		select {
		case r := <-a.ch:
			if r.err != nil {
				a.mu.Lock()
				a.failed = append(a.failed, r.err)
				a.mu.Unlock()
				continue
			}
			return r.conn, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// run hands out l's sessions one at a time.
func (a *AnyListener) run(ctx context.Context, l Listener) {
	for {
		c, err := l.Accept(ctx)
		if err != nil {
			select {
			case a.ch <- accepted{err: err}:
			case <-ctx.Done():
			}
			return
		}
		s := &notifyClose{ReadWriteCloser: c, closed: make(chan struct{})}
		select {
		case a.ch <- accepted{conn: s}:
		case <-ctx.Done():
			c.Close()
			return
		}
		select {
		case <-s.closed:
		case <-ctx.Done():
			return
		}
	}
}

// notifyClose tells run that its session is over.
type notifyClose struct {
	io.ReadWriteCloser
	once   sync.Once
	closed chan struct{}
}

func (n *notifyClose) Close() error {
	err := n.ReadWriteCloser.Close()
	n.once.Do(func() { close(n.closed) })
	return err
}
