package e2e

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// guestIfaces lists a running container's interfaces other than lo, as
// "name address/len" lines (name alone without an IPv4 address), from
// inside it.
func guestIfaces(t *testing.T, ctr string) []string {
	t.Helper()
	out := mustDocker(t, "exec", ctr, "ip", "-o", "-4", "addr", "show")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[1] != "lo" {
			got = append(got, f[1]+" "+f[3])
		}
	}
	slices.Sort(got)
	return got
}

// TestConnectRunning: `docker network connect` gives a running container
// a new interface (eth1) on the network, with an address the other
// containers there reach and a name they resolve, and inspect shows it;
// `docker network disconnect` takes the interface away live. On huskd the
// interface is a NIC hot-plugged into the VM, and its TAP goes with it.
func TestConnectRunning(t *testing.T) {
	s := requireSuite(t)
	img := pulled(t, testimages.Busybox)
	netA, netB := namePrefix(t)+"-a", namePrefix(t)+"-b"
	t.Cleanup(func() {
		for _, n := range []string{netA, netB} {
			cmd := exec.Command(suite.DockerCLI, "network", "rm", n)
			cmd.Env = dockerEnv()
			_ = cmd.Run()
		}
	})
	mustDocker(t, "network", "create", netA)
	mustDocker(t, "network", "create", netB)
	first, second := containerName(t, "-first"), containerName(t, "-second")
	firstID := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", first, "--network", netA, img, "sleep", "3600"))
	mustDocker(t, append([]string{"run", "-d", "--name", second, "--network", netB, img}, webServer("second")...)...)
	secondIP := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{(index .NetworkSettings.Networks \""+netB+"\").IPAddress}}", second))
	taps := func() []string { return hostLinks(t, "hk"+firstID[:12]) }
	if s.Kind == "huskd" {
		if got := taps(); len(got) != 1 {
			t.Fatalf("TAPs of the first container before connect: %v, want one", got)
		}
	}
	before := guestIfaces(t, first)
	if len(before) != 1 || !strings.HasPrefix(before[0], "eth0 ") {
		t.Fatalf("interfaces before connect: %q, want eth0 only", before)
	}
	if r := docker(t, "exec", first, "nslookup", second); r.Code == 0 {
		t.Errorf("%s resolves %s before it is on %s: %+v", first, second, netB, r)
	}

	mustDocker(t, "network", "connect", netB, first)
	var ins []struct {
		NetworkSettings struct {
			Networks map[string]struct {
				NetworkID, EndpointID, IPAddress, Gateway, MacAddress string
				IPPrefixLen                                           int
			}
		}
	}
	if err := json.Unmarshal([]byte(mustDocker(t, "inspect", first)), &ins); err != nil || len(ins) != 1 {
		t.Fatalf("inspect: %v", err)
	}
	nets := ins[0].NetworkSettings.Networks
	a, b := nets[netA], nets[netB]
	if len(nets) != 2 || a.IPAddress == "" || b.IPAddress == "" || b.EndpointID == "" || b.MacAddress == "" || b.Gateway == "" {
		t.Fatalf("inspect Networks after connect: %+v, want %s and %s with addresses", nets, netA, netB)
	}
	if !sameSubnet(b.IPAddress, secondIP) {
		t.Errorf("address on %s %s, not in the subnet of %s's %s", netB, b.IPAddress, second, secondIP)
	}
	want := []string{"eth0 " + a.IPAddress + "/" + strconv.Itoa(a.IPPrefixLen), "eth1 " + b.IPAddress + "/" + strconv.Itoa(b.IPPrefixLen)}
	if got := guestIfaces(t, first); !slices.Equal(got, want) {
		t.Errorf("interfaces after connect: %q, want %q", got, want)
	}
	if mac := mustDocker(t, "exec", first, "cat", "/sys/class/net/eth1/address"); strings.TrimSpace(mac) != b.MacAddress {
		t.Errorf("eth1's MAC %q, inspect says %q", mac, b.MacAddress)
	}
	// dockerd adds a hosts line for the new address.
	hostname := firstID[:12]
	if hosts := mustDocker(t, "exec", first, "cat", "/etc/hosts"); !strings.HasSuffix(hosts, a.IPAddress+"\t"+hostname+"\n"+b.IPAddress+"\t"+hostname+"\n") {
		t.Errorf("/etc/hosts after connect:\n%s\nwant the lines of both addresses last", hosts)
	}
	if r := docker(t, "exec", first, "wget", "-q", "-O", "-", "http://"+second+":8080/"); r.Code != 0 || r.Stdout != "hello from second\n" {
		t.Errorf("%s fetching from %s by name over %s: %+v", first, second, netB, r)
	}
	if r := docker(t, "exec", first, "ping", "-c", "1", "-W", "10", second); r.Code != 0 {
		t.Errorf("%s pinging %s: %+v", first, second, r)
	}
	// The peer resolves the newcomer on the network it joined.
	if r := docker(t, "exec", second, "nslookup", first); r.Code != 0 || !strings.Contains(r.Stdout, b.IPAddress) {
		t.Errorf("%s resolving %s: %+v, want %s", second, first, r, b.IPAddress)
	}
	if s.Kind == "huskd" {
		if got := taps(); len(got) != 2 {
			t.Errorf("TAPs of the first container after connect: %v, want two", got)
		}
	}

	r := docker(t, "network", "connect", netB, first)
	if wantErr := "Error response from daemon: endpoint with name " + first + " already exists in network " + netB + "\n"; r.Code != 1 || r.Stderr != wantErr {
		t.Errorf("second connect: %+v, want exit 1 and %q", r, wantErr)
	}

	mustDocker(t, "network", "disconnect", netB, first)
	if got := guestIfaces(t, first); len(got) != 1 || got[0] != want[0] {
		t.Errorf("interfaces after disconnect: %q, want %q", got, want[:1])
	}
	if out := mustDocker(t, "exec", first, "ls", "/sys/class/net"); strings.Contains(out, "eth1") {
		t.Errorf("eth1 still in the guest after disconnect: %q", out)
	}
	// dockerd 20.10 removes the container's hosts record by its names,
	// which takes the line of its other address too.
	if hosts := mustDocker(t, "exec", first, "cat", "/etc/hosts"); strings.Contains(hosts, hostname) {
		t.Errorf("/etc/hosts after disconnect:\n%s\nwant no line naming %s, as dockerd 20.10", hosts, hostname)
	}
	if got := mustDocker(t, "inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", first); got != netA+" \n" {
		t.Errorf("networks after disconnect = %q, want %s", got, netA)
	}
	if r := docker(t, "exec", first, "nslookup", second); r.Code == 0 {
		t.Errorf("%s still resolves %s after leaving %s: %+v", first, second, netB, r)
	}
	if r := docker(t, "exec", second, "nslookup", first); r.Code == 0 && strings.Contains(r.Stdout, b.IPAddress) {
		t.Errorf("%s still resolves %s to its old address: %+v", second, first, r)
	}
	if s.Kind == "huskd" {
		if got := taps(); len(got) != 1 {
			t.Errorf("TAPs of the first container after disconnect: %v, want one", got)
		}
	}
	r = docker(t, "network", "disconnect", netB, first)
	if wantErr := "Error response from daemon: container " + firstID + " is not connected to network " + netB + "\n"; r.Code != 1 || r.Stderr != wantErr {
		t.Errorf("second disconnect: %+v, want exit 1 and %q", r, wantErr)
	}

	// Connected again, the interface gets the next name: dockerd never
	// reuses one in a running container.
	mustDocker(t, "network", "connect", netB, first)
	bIP := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{(index .NetworkSettings.Networks \""+netB+"\").IPAddress}}", first))
	if got, want := guestIfaces(t, first), []string{want[0], "eth2 " + bIP + "/" + strconv.Itoa(b.IPPrefixLen)}; !slices.Equal(got, want) {
		t.Errorf("interfaces after reconnect: %q, want %q", got, want)
	}
	fetch := func(when string) {
		t.Helper()
		if r := docker(t, "exec", first, "wget", "-q", "-O", "-", "http://"+second+":8080/"); r.Code != 0 || r.Stdout != "hello from second\n" {
			t.Errorf("%s: %s fetching from %s by name: %+v", when, first, second, r)
		}
	}
	fetch("after reconnect")

	if s.Kind == "huskd" {
		// The VM outlives a daemon killed with SIGKILL; the new daemon
		// finds its hot-plugged NIC and unplugs and plugs it, and the
		// interface names go on from where they were.
		crashDaemon(t)
		mustDocker(t, "network", "disconnect", netB, first)
		mustDocker(t, "network", "connect", netB, first)
		if got := guestIfaces(t, first); len(got) != 2 || !strings.HasPrefix(got[1], "eth3 ") {
			t.Errorf("interfaces after a reconnect under a new daemon: %q, want eth0 and eth3", got)
		}
		fetch("after a reconnect under a new daemon")
		// A checkpoint of the VM with its hot-plugged NIC restores into a
		// VM started with that NIC in the same slot.
		mustDocker(t, "checkpoint", "create", first, "cp")
		mustDocker(t, "start", "--checkpoint", "cp", first)
		// The restored container's interfaces are named afresh, as the
		// network's records name them.
		got := guestIfaces(t, first)
		if len(got) != 2 || !strings.HasPrefix(got[0], "eth0 ") || !strings.HasPrefix(got[1], "eth1 ") {
			t.Errorf("interfaces after restoring a checkpoint: %q, want eth0 and eth1", got)
		}
		fetch("after restoring a checkpoint")
		// The restored VM's NICs unplug and plug like any.
		mustDocker(t, "network", "disconnect", netB, first)
		if got := guestIfaces(t, first); len(got) != 1 || !strings.HasPrefix(got[0], "eth0 ") {
			t.Errorf("interfaces after a disconnect in the restored VM: %q, want eth0", got)
		}
		mustDocker(t, "network", "connect", netB, first)
		if got := guestIfaces(t, first); len(got) != 2 || !strings.HasPrefix(got[1], "eth2 ") {
			t.Errorf("interfaces after a connect in the restored VM: %q, want eth0 and eth2", got)
		}
		fetch("after a connect in the restored VM")
	}
	// A new boot has the network from the start, in name order.
	mustDocker(t, "restart", "-t", "1", first)
	got := guestIfaces(t, first)
	if len(got) != 2 || !strings.HasPrefix(got[0], "eth0 ") || !strings.HasPrefix(got[1], "eth1 ") {
		t.Errorf("interfaces after restart: %q, want eth0 and eth1", got)
	}
	fetch("after restart")

	mustDocker(t, "rm", "-f", first, second)
	if s.Kind == "huskd" {
		if got := hostLinks(t, "hk"+firstID[:12]); len(got) != 0 {
			t.Errorf("TAPs left after rm: %v", got)
		}
	}
}

var dotted = regexp.MustCompile(`^(\d+\.\d+\.\d+)\.\d+$`)

// sameSubnet compares the first three bytes of two addresses: user
// networks are /24s.
func sameSubnet(a, b string) bool {
	ma, mb := dotted.FindStringSubmatch(a), dotted.FindStringSubmatch(b)
	return ma != nil && mb != nil && ma[1] == mb[1]
}
