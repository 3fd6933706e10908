// Package harness runs the pieces an end-to-end test or benchmark of husk
// needs: a network namespace of its own, a Debian docker-registry inside it,
// and the daemon under test (huskd, or Debian's dockerd as the reference)
// inside it too.
//
// Everything that speaks TCP lives in the namespace, so no test traffic
// can leave loopback of a namespace the harness created. The docker CLI
// stays in the root namespace: it reaches the daemon through a unix socket
// on the shared filesystem, which network namespaces do not separate.
//
// Processes enter the namespace with `nsenter --net` rather than
// `ip netns exec`: the latter also moves the process into a private mount
// namespace with a fresh /sys, which hides the cgroup hierarchy mounted
// under /sys/fs/cgroup, and dockerd then refuses to start ("Devices cgroup
// isn't mounted").
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace created with `ip netns add`, with lo up.
type Netns struct {
	Name string
	// Path is the namespace's bind mount, /var/run/netns/<Name>.
	Path string
}

// NewNetns creates the network namespace name and brings its loopback up.
func NewNetns(ctx context.Context, name string) (*Netns, error) {
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	n := &Netns{Name: name, Path: filepath.Join("/var/run/netns", name)}
	if out, err := exec.CommandContext(ctx, "ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		err = fmt.Errorf("bring up lo in %s: %w: %s", name, err, strings.TrimSpace(string(out)))
		if cerr := n.Close(ctx); cerr != nil {
			err = fmt.Errorf("%w (and %v)", err, cerr)
		}
		return nil, err
	}
	return n, nil
}

// Command returns a command that runs name with args inside the namespace.
// nsenter execs name in place, so the command's process is name itself and
// signals sent to it reach name. It takes no context because the processes
// it starts are long-lived and stopped explicitly.
func (n *Netns) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + n.Path, "--", name}, args...)...)
}

// The main goroutine keeps the main thread to itself, so no goroutine that
// Do leaves locked can run there.
func init() { runtime.LockOSThread() }

// Do runs fn on an OS thread that has joined the namespace, so sockets fn
// creates belong to it. The thread returns to the root namespace
// afterwards; if it cannot, it stays locked, and the runtime ends it when
// the goroutine exits instead of reusing it in the wrong namespace (the
// init above keeps that thread from being the main one, which the runtime
// would park for good instead). Threads must not end in the normal case:
// a child started with Pdeathsig from a thread gets its signal when that
// thread exits.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- fmt.Errorf("open current netns: %w", err)
			return
		}
		defer orig.Close()
		target, err := os.Open(n.Path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open netns %s: %w", n.Name, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", n.Name, err)
			return
		}
		err = fn()
		if rerr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); rerr != nil {
			errc <- errors.Join(err, fmt.Errorf("leave netns %s: %w", n.Name, rerr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// DialContext dials addr from inside the namespace. A TCP socket stays in
// the namespace it was created in, so the connection can be used from any
// goroutine afterwards.
func (n *Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := n.Do(func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// Transport is an HTTP transport whose connections are made inside the
// namespace.
func (n *Netns) Transport() *http.Transport {
	return &http.Transport{DialContext: n.DialContext, ForceAttemptHTTP2: false}
}

// FreePort returns a TCP port on 127.0.0.1 that is free inside the
// namespace at the time of the call.
func (n *Netns) FreePort() (int, error) {
	var port int
	err := n.Do(func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("listen for a free port: %w", err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	})
	return port, err
}

// Close deletes the namespace.
func (n *Netns) Close(ctx context.Context) error {
	if out, err := exec.CommandContext(ctx, "ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", n.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
