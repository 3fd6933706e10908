//go:build linux

package agent_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/host"
)

// failing is a listener whose channel does not exist.
type failing struct{ err error }

func (f failing) Accept(context.Context) (io.ReadWriteCloser, error) { return nil, f.err }

// countingListener counts Accept calls and hands out what it is given.
type countingListener struct {
	conns chan io.ReadWriteCloser
	calls chan struct{}
}

func (l *countingListener) Accept(ctx context.Context) (io.ReadWriteCloser, error) {
	l.calls <- struct{}{}
	select {
	case c := <-l.conns:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestAnyListenerOneSessionPerListener(t *testing.T) {
	c := ctx(t)
	serial := &countingListener{conns: make(chan io.ReadWriteCloser, 2), calls: make(chan struct{}, 4)}
	vsock := failing{errors.New("no vsock")}
	l := agent.NewAnyListener(serial, vsock)

	a1, _ := net.Pipe()
	serial.conns <- a1
	s1, err := l.Accept(c)
	if err != nil {
		t.Fatal(err)
	}
	<-serial.calls
	// While s1 is open the serial listener must not be asked again: a
	// serial port carries one session at a time.
	a2, _ := net.Pipe()
	serial.conns <- a2
	got := make(chan io.ReadWriteCloser, 1)
	go func() {
		s, err := l.Accept(c)
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	select {
	case <-serial.calls:
		t.Fatal("serial listener asked for a second session while the first is open")
	case <-got:
		t.Fatal("second session handed out while the first is open")
	default:
	}
	s1.Close()
	<-serial.calls
	if s2 := <-got; s2 == nil {
		t.Fatal("no second session after the first closed")
	} else {
		s2.Close()
	}
}

func TestAnyListenerAllFail(t *testing.T) {
	l := agent.NewAnyListener(failing{errors.New("no serial port")}, failing{errors.New("no vsock")})
	_, err := l.Accept(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "no serial port") || !strings.Contains(err.Error(), "no vsock") {
		t.Fatalf("err = %v, want both failures", err)
	}
}

// TestServeOverAnyListener runs a whole session through the merged
// listener while its other channel has failed, as under QEMU without
// vsock or cloud-hypervisor without virtio-serial.
func TestServeOverAnyListener(t *testing.T) {
	f := newFixture(t)
	ch := make(listener)
	sctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- f.agent.Serve(sctx, agent.NewAnyListener(failing{errors.New("no serial port")}, ch))
	}()
	defer func() {
		cancel()
		if err := <-served; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve returned %v, want context.Canceled", err)
		}
	}()
	for i := range 2 {
		h, a := net.Pipe()
		ch <- a
		c, err := host.New(h)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := c.Ping(ctx(t)); err != nil || info.Kernel == "" {
			t.Fatalf("session %d ping: %+v %v", i, info, err)
		}
		c.Close()
	}
}
