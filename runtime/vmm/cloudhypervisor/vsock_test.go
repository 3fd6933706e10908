package cloudhypervisor

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// vsockPeer listens on a unix socket and hands each connection, with the
// CONNECT line it sent, to answer.
func vsockPeer(t *testing.T, answer func(n int, c net.Conn, line string)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vsock.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				line, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
				if err != nil {
					c.Close()
					return
				}
				answer(int(n.Add(1)), c, line)
			}()
		}
	}()
	return path
}

func TestHybridVsockHandshake(t *testing.T) {
	// released lets the silent peers' connections go at the end.
	released := make(chan struct{})
	defer close(released)
	tests := []struct {
		name   string
		answer func(n int, c net.Conn, line string)
		// ctxTimeout bounds the whole dial where the peer never agrees.
		ctxTimeout time.Duration
		wantErr    func(error) bool
		wantData   string
		wantConns  int32
	}{
		{
			name: "ok, with the guest's first bytes in the same write",
			answer: func(_ int, c net.Conn, line string) {
				if line != "CONNECT 1024\n" {
					c.Write([]byte("bad request " + line))
				}
				c.Write([]byte("OK 1073741824\nguest says hi\n"))
				<-released
				c.Close()
			},
			wantData: "guest says hi\n",
		},
		{
			name: "garbage fails at once",
			answer: func(_ int, c net.Conn, _ string) {
				c.Write([]byte("HTTP/1.1 400 Bad Request\n"))
				c.Close()
			},
			wantErr: func(err error) bool {
				return errors.Is(err, ErrHandshake) && strings.Contains(err.Error(), `answered "HTTP/1.1 400 Bad Request"`)
			},
		},
		{
			name: "OK without a port is garbage",
			answer: func(_ int, c net.Conn, _ string) {
				c.Write([]byte("OK\n"))
				c.Close()
			},
			wantErr: func(err error) bool { return errors.Is(err, ErrHandshake) },
		},
		{
			name: "a peer that never answers: each attempt times out until ctx ends",
			answer: func(_ int, c net.Conn, _ string) {
				<-released
				c.Close()
			},
			ctxTimeout: 500 * time.Millisecond,
			wantErr: func(err error) bool {
				return errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrHandshake)
			},
		},
		{
			name: "refused while the guest boots, then accepted",
			answer: func(n int, c net.Conn, _ string) {
				if n < 3 {
					c.Close() // what cloud-hypervisor does when nothing listens
					return
				}
				c.Write([]byte("OK 5\n"))
				io.Copy(c, c) // echo
			},
			wantData:  "",
			wantConns: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var conns atomic.Int32
			path := vsockPeer(t, func(n int, c net.Conn, line string) {
				conns.Store(int32(n))
				tt.answer(n, c, line)
			})
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			if tt.ctxTimeout > 0 {
				cancel()
				ctx, cancel = context.WithTimeout(context.Background(), tt.ctxTimeout)
			}
			defer cancel()
			c, err := DialHybridVsock(ctx, path, 1024, 100*time.Millisecond)
			if tt.wantErr != nil {
				if err == nil {
					c.Close()
					t.Fatal("dial succeeded")
				}
				if !tt.wantErr(err) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tt.wantConns > 0 && conns.Load() != tt.wantConns {
				t.Errorf("connected after %d attempts, want %d", conns.Load(), tt.wantConns)
			}
			// The handshake's deadline must not linger on the stream.
			time.Sleep(150 * time.Millisecond)
			if tt.wantData != "" {
				got, err := bufio.NewReader(c).ReadString('\n')
				if err != nil || got != tt.wantData {
					t.Errorf("stream starts with %q %v, want %q", got, err, tt.wantData)
				}
				return
			}
			c.Write([]byte("ping\n"))
			got, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || got != "ping\n" {
				t.Errorf("echo %q %v", got, err)
			}
		})
	}
}

func TestHybridVsockCancel(t *testing.T) {
	path := vsockPeer(t, func(_ int, c net.Conn, _ string) { c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := DialHybridVsock(ctx, path, 1024, time.Minute)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}
