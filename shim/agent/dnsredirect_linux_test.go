//go:build linux

package agent_test

import (
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/proto"
)

type fakeDNSRedirect struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeDNSRedirect) Set(addr, to netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, addr.String()+" -> "+to.String())
	return nil
}

// The guest's 127.0.0.11:53 follows the DNS server the setup and each
// refresh that rewrites resolv.conf name; a refresh that leaves
// resolv.conf alone leaves it alone too.
func TestDNSRedirectFollowsResolvConf(t *testing.T) {
	f := &fakeDNSRedirect{}
	c := serveAgent(t, agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(t.TempDir()), StateDir: t.TempDir(),
		Refresher: &fakeRefresher{}, DNSRedirect: f})
	resolv := "nameserver 127.0.0.11\noptions ndots:0\n"
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "a", ResolvConf: resolv, DNSServer: "10.124.0.1:53"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []proto.IdentitySpec{
		{Hostname: "b", ResolvConf: resolv, DNSServer: "10.125.0.1:53"},
		{Hostname: "c"},
		{Hostname: "d", ResolvConf: "nameserver 10.0.0.1\n"},
	} {
		if err := c.Refresh(ctx(t), proto.RefreshSpec{Identity: &id}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"127.0.0.11:53 -> 10.124.0.1:53",
		"127.0.0.11:53 -> 10.125.0.1:53",
		"127.0.0.11:53 -> invalid AddrPort",
	}
	if got := strings.Join(f.calls, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("redirections:\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}

// An agent that cannot redirect refuses a DNS server rather than leave
// the container a resolv.conf naming an address nothing answers.
func TestDNSServerWithoutRedirect(t *testing.T) {
	c := serveAgent(t, agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(t.TempDir()), StateDir: t.TempDir()})
	err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "a", ResolvConf: "nameserver 127.0.0.11\n", DNSServer: "10.124.0.1:53"})
	if err == nil || !strings.Contains(err.Error(), "does not redirect DNS") {
		t.Errorf("setup = %v, want a refusal", err)
	}
}
