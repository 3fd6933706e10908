//go:build linux

package embeddeddns

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clientEnv makes the test binary the client of TestRedirect, run in the
// redirected cgroup.
const clientEnv = "EMBEDDEDDNS_TEST_CLIENT"

var embedded = netip.MustParseAddrPort("127.0.0.11:53")

func TestMain(m *testing.M) {
	if os.Getenv(clientEnv) != "" {
		if err := client(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// client asks 127.0.0.11:53 over unconnected UDP, connected UDP and TCP
// and prints each answer with the address it came from.
func client() error {
	deadline := time.Now().Add(3 * time.Second)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer pc.Close()
	pc.SetDeadline(deadline)
	if _, err := pc.WriteTo([]byte("udp"), net.UDPAddrFromAddrPort(embedded)); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		return fmt.Errorf("unconnected udp: %w", err)
	}
	fmt.Printf("%s from %s\n", buf[:n], from)

	// A dual-stack socket sends to the IPv4-mapped address.
	pc6, err := net.ListenPacket("udp", "[::]:0")
	if err != nil {
		return err
	}
	defer pc6.Close()
	pc6.SetDeadline(deadline)
	if _, err := pc6.WriteTo([]byte("dual-stack-udp"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(embedded.Addr().As16()), embedded.Port()))); err != nil {
		return err
	}
	n, from, err = pc6.ReadFrom(buf)
	if err != nil {
		return fmt.Errorf("dual-stack udp: %w", err)
	}
	fmt.Printf("%s from %s\n", buf[:n], from)

	uc, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(embedded))
	if err != nil {
		return err
	}
	defer uc.Close()
	uc.SetDeadline(deadline)
	if _, err := uc.Write([]byte("connected-udp")); err != nil {
		return err
	}
	n, src, err := uc.ReadFromUDPAddrPort(buf)
	if err != nil {
		return fmt.Errorf("connected udp: %w", err)
	}
	fmt.Printf("%s from %s\n", buf[:n], src)

	tc, err := net.DialTimeout("tcp4", embedded.String(), 5*time.Second)
	if err != nil {
		fmt.Println("tcp:", err)
		return nil
	}
	defer tc.Close()
	tc.SetDeadline(deadline)
	fmt.Fprintln(tc, "tcp")
	line, err := bufio.NewReader(tc).ReadString('\n')
	if err != nil {
		return fmt.Errorf("tcp: %w", err)
	}
	fmt.Print(line)
	return nil
}

// echo serves UDP and TCP on a loopback port, answering each message
// with tag and the message.
func echo(t *testing.T, tag string) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	addr := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	l, err := net.Listen("tcp4", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(tag+" "+string(buf[:n])), from)
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Fprint(c, tag+" "+line)
			c.Close()
		}
	}()
	return addr
}

// cgroup2 is where the host's cgroup v2 hierarchy is mounted, or "".
func cgroup2(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		_, after, ok := strings.Cut(line, " - ")
		if f := strings.Fields(line); ok && len(f) > 4 && strings.HasPrefix(after, "cgroup2 ") {
			return f[4]
		}
	}
	return ""
}

// runClient runs client in dir's cgroup and returns what it printed.
func runClient(t *testing.T, dir string) (string, error) {
	t.Helper()
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clientEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestRedirect runs on the host, in a cgroup of its own: the programs
// must reach only the client's sockets.
func TestRedirect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("attaching cgroup programs needs root")
	}
	root := cgroup2(t)
	if root == "" {
		t.Skip("no cgroup v2 hierarchy")
	}
	dir := filepath.Join(root, fmt.Sprintf("husk-embeddeddns-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove the test cgroup: %v", err)
		}
	})
	r := &Redirect{Cgroup: func() (string, error) { return dir, nil }}
	t.Cleanup(func() { r.Set(embedded, netip.AddrPort{}) })

	first, second := echo(t, "first"), echo(t, "second")
	for _, tc := range []struct {
		to   netip.AddrPort
		want string
	}{
		{first, "first udp from 127.0.0.11:53\nfirst dual-stack-udp from 127.0.0.11:53\nfirst connected-udp from 127.0.0.11:53\nfirst tcp\n"},
		// Replacing the target swaps the programs in place.
		{second, "second udp from 127.0.0.11:53\nsecond dual-stack-udp from 127.0.0.11:53\nsecond connected-udp from 127.0.0.11:53\nsecond tcp\n"},
	} {
		if err := r.Set(embedded, tc.to); err != nil {
			t.Fatal(err)
		}
		if got, err := runClient(t, dir); err != nil || got != tc.want {
			t.Errorf("to %s: client printed\n%s(%v)\nwant\n%s", tc.to, got, err, tc.want)
		}
	}

	if err := r.Set(embedded, netip.AddrPort{}); err != nil {
		t.Fatal(err)
	}
	// Nothing listens on 127.0.0.11:53 itself.
	if _, err := net.DialTimeout("tcp4", embedded.String(), 5*time.Second); err == nil {
		t.Skip("something on this host listens on 127.0.0.11:53")
	}
	if out, err := runClient(t, dir); err == nil {
		t.Errorf("after the redirection stopped, the client printed\n%s", out)
	}
}
