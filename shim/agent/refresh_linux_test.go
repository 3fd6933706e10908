package agent_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

type fakeRefresher struct {
	mu      sync.Mutex
	clock   time.Time
	entropy []byte
	fail    error

	network       *proto.NetworkSpec
	readdresses   int
	readdressFail error
	hostnames     []string
}

func (f *fakeRefresher) SetClock(t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock = t
	return f.fail
}

func (f *fakeRefresher) Readdress(_ context.Context, spec *proto.NetworkSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readdresses++
	if f.readdressFail != nil {
		return f.readdressFail
	}
	f.network = spec
	return nil
}

func (f *fakeRefresher) SetHostname(pid int, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hostnames = append(f.hostnames, name)
	return nil
}

func (f *fakeRefresher) Reseed(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entropy = append([]byte(nil), b...)
	return nil
}

func refreshClient(t *testing.T, r agent.Refresher) *host.Client {
	t.Helper()
	return refreshClientIn(t, r, t.TempDir())
}

func refreshClientIn(t *testing.T, r agent.Refresher, stateDir string) *host.Client {
	t.Helper()
	return serveAgent(t, agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(t.TempDir()), StateDir: stateDir, Refresher: r})
}

// serveAgent runs an agent with opts on one end of a pipe, for as long as
// the test, and returns a client on the other.
func serveAgent(t *testing.T, opts agent.Options) *host.Client {
	t.Helper()
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	hostEnd, agentEnd := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- a.ServeConn(context.Background(), agentEnd) }()
	c, err := host.New(hostEnd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		hostEnd.Close()
		<-done
	})
	return c
}

func TestRefresh(t *testing.T) {
	f := &fakeRefresher{}
	c := refreshClient(t, f)
	when := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	entropy := bytes.Repeat([]byte{7}, 32)
	if err := c.Refresh(ctx(t), proto.RefreshSpec{TimeUnixNano: when.UnixNano(), Entropy: entropy}); err != nil {
		t.Fatal(err)
	}
	if !f.clock.Equal(when) {
		t.Errorf("clock %v, want %v", f.clock, when)
	}
	// The reseed ends before any process starts; this one fails for want
	// of a setup, after that.
	if _, err := c.Start(ctx(t), "p", proto.ProcessSpec{Args: []string{"true"}}); err == nil {
		t.Error("start without a setup succeeded")
	}
	if f.mu.Lock(); !bytes.Equal(f.entropy, entropy) {
		t.Errorf("entropy %x, want %x", f.entropy, entropy)
	}
	f.mu.Unlock()

	f.fail = errors.New("clock is read-only")
	err := c.Refresh(ctx(t), proto.RefreshSpec{TimeUnixNano: 1})
	if err == nil || err.Error() != "clock is read-only" {
		t.Errorf("failing refresh: %v", err)
	}
}

func TestRefreshWithoutRefresher(t *testing.T) {
	c := refreshClient(t, nil)
	var ae *host.AgentError
	if err := c.Refresh(ctx(t), proto.RefreshSpec{TimeUnixNano: 1}); !errors.As(err, &ae) || ae.Kind != proto.KindInvalid {
		t.Errorf("refresh without a refresher: %v, want an invalid-request agent error", err)
	}
}

// A restored copy takes its own identity: the network goes to the
// Refresher, and the container's etc files change in place, because the
// container sees them through bind mounts of those very inodes.
func TestRefreshIdentity(t *testing.T) {
	f := &fakeRefresher{}
	state := t.TempDir()
	c := refreshClientIn(t, f, state)
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "old", Hosts: "10.0.0.2\told\n", ResolvConf: "nameserver 10.0.0.1\n"}); err != nil {
		t.Fatal(err)
	}
	hosts := filepath.Join(state, "etc", "hosts")
	before, err := os.Stat(hosts)
	if err != nil {
		t.Fatal(err)
	}
	net := &proto.NetworkSpec{Interfaces: []proto.InterfaceSpec{{MAC: "02:42:0a:7b:00:03", Name: "eth0", Address: "10.123.0.3/16", Gateway: "10.123.0.1"}}}
	err = c.Refresh(ctx(t), proto.RefreshSpec{Identity: &proto.IdentitySpec{
		Hostname: "new", Hosts: "10.123.0.3\tnew\n", ResolvConf: "nameserver 10.123.0.1\n", Network: net,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if f.network == nil || f.network.Interfaces[0].Address != "10.123.0.3/16" {
		t.Errorf("network given to the refresher: %+v", f.network)
	}
	after, err := os.Stat(hosts)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("/etc/hosts was replaced, not rewritten: the container's bind mount would keep the old one")
	}
	for name, want := range map[string]string{"hosts": "10.123.0.3\tnew\n", "resolv.conf": "nameserver 10.123.0.1\n", "hostname": "new\n"} {
		got, err := os.ReadFile(filepath.Join(state, "etc", name))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", name, got, err, want)
		}
	}
}

// A refresh re-addresses the guest only when the network it asks for is
// not the one the guest was last given: a checkpoint restored into its
// own container keeps its address and MAC. After an interface change,
// or a re-addressing that failed, the guest's network is unknown and the
// next refresh re-addresses it in full.
func TestRefreshSkipsUnchangedNetwork(t *testing.T) {
	eth0 := func(addr, mac string) *proto.NetworkSpec {
		return &proto.NetworkSpec{Interfaces: []proto.InterfaceSpec{{MAC: mac, Name: "eth0", Address: addr, Gateway: "10.123.0.1"}}}
	}
	atSetup := eth0("10.123.0.2/16", "02:42:0a:7b:00:02")
	atSetup.Interfaces[0].DeviceMAC = "02:42:0a:7b:ff:ff" // a template's NIC
	f := &fakeRefresher{}
	var configured int
	c := serveAgent(t, agent.Options{
		InitExe: testInitExe, Rootfs: agent.DirRootfs(t.TempDir()), StateDir: t.TempDir(), Refresher: f, Interfaces: &fakeInterfaces{},
		Network: func(context.Context, *proto.NetworkSpec) error { configured++; return nil },
	})
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "abc", Network: atSetup}); err != nil {
		t.Fatal(err)
	}
	if configured != 1 {
		t.Fatalf("setup configured the network %d times, want 1", configured)
	}
	refresh := func(n *proto.NetworkSpec) error {
		return c.Refresh(ctx(t), proto.RefreshSpec{Identity: &proto.IdentitySpec{Hostname: "abc", Network: n}})
	}
	steps := []struct {
		name    string
		do      func() error
		wantErr bool
		want    int // re-addressings so far
	}{
		{"the setup's network, upper-case MAC", func() error { return refresh(eth0("10.123.0.2/16", "02:42:0A:7B:00:02")) }, false, 0},
		{"another address", func() error { return refresh(eth0("10.123.0.3/16", "02:42:0a:7b:00:03")) }, false, 1},
		{"that address again", func() error { return refresh(eth0("10.123.0.3/16", "02:42:0a:7b:00:03")) }, false, 1},
		{"a failed re-addressing", func() error {
			f.mu.Lock()
			f.readdressFail = errors.New("no such link")
			f.mu.Unlock()
			defer func() { f.mu.Lock(); f.readdressFail = nil; f.mu.Unlock() }()
			return refresh(eth0("10.123.0.4/16", "02:42:0a:7b:00:04"))
		}, true, 2},
		{"the address before the failure", func() error { return refresh(eth0("10.123.0.3/16", "02:42:0a:7b:00:03")) }, false, 3},
		{"an interface added", func() error {
			return c.AddInterface(ctx(t), proto.InterfaceChangeSpec{Interface: proto.InterfaceSpec{MAC: "02:42:0a:7c:00:02", Name: "eth1", Address: "10.124.0.2/16"}})
		}, false, 3},
		{"the same network after it", func() error { return refresh(eth0("10.123.0.3/16", "02:42:0a:7b:00:03")) }, false, 4},
		{"no network", func() error { return refresh(nil) }, false, 4},
	}
	for _, s := range steps {
		err := s.do()
		if (err != nil) != s.wantErr {
			t.Fatalf("%s: err = %v, want error %v", s.name, err, s.wantErr)
		}
		f.mu.Lock()
		got := f.readdresses
		f.mu.Unlock()
		if got != s.want {
			t.Fatalf("%s: %d re-addressings so far, want %d", s.name, got, s.want)
		}
	}
}

// pipeGuest is a guest whose every dial reaches a real agent over a pipe,
// once the agent has woken up (wake later).
type pipeGuest struct {
	t     *testing.T
	a     *agent.Agent
	wake  time.Duration
	mu    sync.Mutex
	dials int
}

func (g *pipeGuest) DialAgent(context.Context) (net.Conn, error) {
	g.mu.Lock()
	g.dials++
	g.mu.Unlock()
	hostEnd, agentEnd := net.Pipe()
	done := make(chan error, 1)
	go func() {
		time.Sleep(g.wake)
		done <- g.a.ServeConn(context.Background(), agentEnd)
	}()
	g.t.Cleanup(func() {
		hostEnd.Close()
		<-done
	})
	return hostEnd, nil
}

func (g *pipeGuest) Wait(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (g *pipeGuest) PID() int { return 1 }

// TestConnectWithRefresh: a restore connects with the refresh as the
// session's first request, built only once the waking agent has answered
// the session's start (it carries the host's clock); an agent's refusal
// of it ends the connect at once rather than being dialled again until
// the ready timeout.
func TestConnectWithRefresh(t *testing.T) {
	const wake = 100 * time.Millisecond
	when := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	var built time.Time
	refresh := func(ctx context.Context, c *host.Client) error {
		built = time.Now()
		return c.Refresh(ctx, proto.RefreshSpec{TimeUnixNano: when.UnixNano()})
	}
	for _, tc := range []struct {
		name string
		fail error
	}{
		{"refreshed", nil},
		{"refused", errors.New("clock is read-only")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRefresher{fail: tc.fail}
			a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(t.TempDir()), StateDir: t.TempDir(), Refresher: f})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			g := &pipeGuest{t: t, a: a, wake: wake}
			dialled := time.Now()
			c, err := host.ConnectWith(ctx(t), g, time.Millisecond, refresh)
			if c != nil {
				t.Cleanup(func() { c.Close() })
			}
			var agentErr *host.AgentError
			switch {
			case tc.fail == nil && err != nil:
				t.Fatalf("ConnectWith: %v", err)
			case tc.fail != nil && (!errors.As(err, &agentErr) || agentErr.Message != tc.fail.Error()):
				t.Fatalf("ConnectWith with a refused refresh: %v, want the agent's %q", err, tc.fail)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if !f.clock.Equal(when) {
				t.Errorf("clock %v, want %v", f.clock, when)
			}
			if g.dials != 1 {
				t.Errorf("%d dials, want 1", g.dials)
			}
			if early := built.Sub(dialled); early < wake {
				t.Errorf("refresh built %v after the dial, before the agent woke (%v)", early, wake)
			}
		})
	}
}
