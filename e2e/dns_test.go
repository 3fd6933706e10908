package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/husk-vm/husk/e2e/testimages"
)

// TestDNSFlagOnUserNetwork: on a user-defined network, --dns does not
// replace the network's DNS server in the container's resolv.conf (the
// server still answers for container names), but names it does not know
// are forwarded to the --dns servers, as dockerd's embedded DNS forwards
// them. The upstream here is a DNS server on a loopback address of the
// daemon's own namespace.
func TestDNSFlagOnUserNetwork(t *testing.T) {
	requireBridge(t)
	img := pulled(t, testimages.Busybox)
	var pc net.PacketConn
	if err := suiteNetns().Do(func() (err error) {
		pc, err = net.ListenPacket("udp4", "127.0.0.77:53")
		return err
	}); err != nil {
		t.Fatalf("listen in the daemon's namespace: %v", err)
	}
	upstream := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Name == "upstream.test." && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(10, 9, 9, 9)})
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = upstream.ActivateAndServe() }()
	t.Cleanup(func() { _ = upstream.Shutdown() })

	netName, peer := networkWithPeer(t, img)

	r := docker(t, "run", "--rm", "--network", netName, "--dns", "127.0.0.77", img, "sh", "-c",
		"grep -c 127.0.0.77 /etc/resolv.conf; nslookup -type=a upstream.test | grep -c 10.9.9.9; nslookup -type=a "+peer+" | grep -c Address:")
	// resolv.conf does not name 127.0.0.77; the upstream's answer comes
	// through; the peer still resolves (the server's and its own address).
	if want := "0\n1\n2\n"; r.Stdout != want {
		t.Errorf("stdout %q (stderr %q), want %q", r.Stdout, r.Stderr, want)
	}
	// Without --dns, the name goes to the host's nameservers, which the
	// suite's namespace cannot reach: the upstream is not asked.
	r = docker(t, "run", "--rm", "--network", netName, img, "sh", "-c", "nslookup -type=a upstream.test | grep -c 10.9.9.9")
	if strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("without --dns: stdout %q, want 0", r.Stdout)
	}
}

// A container on a user-defined network finds the embedded DNS server at
// 127.0.0.11, as under dockerd, and port 53 stays its own: a DNS server in
// the container can bind it, and names still resolve.
func TestEmbeddedDNSLeavesPort53(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	helper := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(helper, "udpbind"), "./testdata/udpbind")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build udpbind: %v\n%s", err, b)
	}
	netName, peer := networkWithPeer(t, img)

	r := docker(t, "run", "--rm", "--network", netName, "-v", helper+":/helper:ro", img, "sh", "-c",
		"grep ^nameserver /etc/resolv.conf; /helper/udpbind 53 & p=$!; sleep 2; nslookup -type=a "+peer+" | grep -c ^Address:; "+
			"nslookup -type=a "+peer+" 127.0.0.11 >/dev/null && echo resolved; kill $p")
	if want := "nameserver 127.0.0.11\nbound 0.0.0.0:53\n2\nresolved\n"; r.Stdout != want {
		t.Errorf("stdout %q (stderr %q), want %q", r.Stdout, r.Stderr, want)
	}
}

// networkWithPeer makes a user-defined network with a container of img
// running on it, both removed when the test ends.
func networkWithPeer(t *testing.T, img string) (network, peer string) {
	t.Helper()
	network = namePrefix(t) + "-net"
	mustDocker(t, "network", "create", network)
	t.Cleanup(func() { docker(t, "network", "rm", network) })
	peer = containerName(t, "-peer")
	mustDocker(t, "run", "-d", "--name", peer, "--network", network, img, "sleep", "1000")
	t.Cleanup(func() { docker(t, "rm", "-f", peer) })
	return network, peer
}
