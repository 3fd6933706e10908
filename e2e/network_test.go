package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
)

// Every address these tests reach is loopback or a bridge inside the
// suite's own network namespace, where the daemon runs.

// requireBridge skips dockerd: the reference runs with --bridge=none, so
// it has no default bridge to compare with.
func requireBridge(t *testing.T) *suiteState {
	t.Helper()
	s := requireSuite(t)
	if s.Kind != "huskd" {
		t.Skip("the reference dockerd runs with --bridge=none and --iptables=false: no bridge to publish on")
	}
	return s
}

func suiteNetns() *harness.Netns {
	return &harness.Netns{Name: suite.Netns, Path: "/var/run/netns/" + suite.Netns}
}

// httpGet fetches url from inside the suite's namespace.
func httpGet(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	client := &http.Client{Transport: suiteNetns().Transport()}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// hostLinks lists the interfaces in the suite's namespace whose names
// begin with prefix.
func hostLinks(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := exec.Command("ip", "-n", suite.Netns, "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names
}

// netInspected is the network part of `docker inspect`.
type netInspected struct {
	NetworkSettings struct {
		IPAddress  string
		Gateway    string
		MacAddress string
		Ports      map[string][]struct{ HostIp, HostPort string }
		Networks   map[string]struct {
			NetworkID, EndpointID, IPAddress, Gateway, MacAddress string
			IPPrefixLen                                           int
		}
	}
	HostConfig struct {
		NetworkMode  string
		PortBindings map[string][]struct{ HostIp, HostPort string }
	}
}

func inspectNet(t *testing.T, name string) netInspected {
	t.Helper()
	var got []netInspected
	if err := json.Unmarshal([]byte(mustDocker(t, "container", "inspect", name)), &got); err != nil || len(got) != 1 {
		t.Fatalf("inspect %s: %v", name, err)
	}
	return got[0]
}

// webServer is a busybox httpd serving "hello from NAME" on port 8080.
func webServer(name string) []string {
	return []string{"sh", "-c", "mkdir -p /www && echo hello from " + name + " > /www/index.html && exec httpd -f -p 8080 -h /www"}
}

var bridgeAddr = regexp.MustCompile(`^10\.123\.0\.(\d+)$`)

// TestDefaultBridge: a container on the default bridge gets an address,
// a gateway and a MAC as dockerd shows them, publishes a port on
// 127.0.0.1, is reached by address from another container, and leaves no
// listener or TAP behind once removed.
func TestDefaultBridge(t *testing.T) {
	requireBridge(t)
	img := pulled(t, testimages.Busybox)
	srv := containerName(t, "-srv")
	mustDocker(t, append([]string{"run", "-d", "--name", srv, "-p", "127.0.0.1::8080", img}, webServer("srv")...)...)

	got := inspectNet(t, srv)
	ns := got.NetworkSettings
	m := bridgeAddr.FindStringSubmatch(ns.IPAddress)
	if m == nil || ns.Gateway != "10.123.0.1" {
		t.Fatalf("IPAddress %q, Gateway %q; want 10.123.0.x and 10.123.0.1", ns.IPAddress, ns.Gateway)
	}
	var a, b, c, d int
	fmt.Sscanf(ns.IPAddress, "%d.%d.%d.%d", &a, &b, &c, &d)
	if want := fmt.Sprintf("02:42:%02x:%02x:%02x:%02x", a, b, c, d); ns.MacAddress != want {
		t.Errorf("MacAddress = %q, want %q (derived from the address, as dockerd)", ns.MacAddress, want)
	}
	br := ns.Networks["bridge"]
	if br.IPAddress != ns.IPAddress || br.Gateway != ns.Gateway || br.MacAddress != ns.MacAddress || br.IPPrefixLen != 16 || br.NetworkID == "" || br.EndpointID == "" {
		t.Errorf("Networks.bridge = %+v, want the same address, gateway and MAC, /16 and IDs", br)
	}
	if got.HostConfig.NetworkMode != "bridge" {
		t.Errorf("HostConfig.NetworkMode = %q, want bridge", got.HostConfig.NetworkMode)
	}
	bound := ns.Ports["8080/tcp"]
	if len(bound) != 1 || bound[0].HostIp != "127.0.0.1" || bound[0].HostPort == "" || bound[0].HostPort == "0" {
		t.Fatalf("Ports[8080/tcp] = %+v, want one random port on 127.0.0.1", bound)
	}
	if pb := got.HostConfig.PortBindings["8080/tcp"]; len(pb) != 1 || pb[0].HostIp != "127.0.0.1" || pb[0].HostPort != "" {
		t.Errorf("HostConfig.PortBindings = %+v, want what the user asked for (127.0.0.1, no port)", pb)
	}
	hostPort := bound[0].HostPort
	if out := mustDocker(t, "port", srv); out != "8080/tcp -> 127.0.0.1:"+hostPort+"\n" {
		t.Errorf("docker port = %q", out)
	}
	if out := mustDocker(t, "port", srv, "8080"); out != "127.0.0.1:"+hostPort+"\n" {
		t.Errorf("docker port 8080 = %q", out)
	}
	url := "http://127.0.0.1:" + hostPort + "/"
	eventually(t, "published port answers", func() string {
		body, err := httpGet(url)
		if err != nil {
			return err.Error()
		}
		if body != "hello from srv\n" {
			return fmt.Sprintf("body %q", body)
		}
		return ""
	})
	if out := mustDocker(t, "ps", "--filter", "name=^"+srv+"$", "--format", "{{.Ports}}"); out != "127.0.0.1:"+hostPort+"->8080/tcp\n" {
		t.Errorf("ps Ports = %q", out)
	}

	// Another container: its own address, hostname in /etc/hosts, the
	// first server reached by address through the bridge.
	cli := containerName(t, "-cli")
	script := `ip -o -4 addr show eth0 | awk '{print $4}'; ip route | grep default; tail -n 1 /etc/hosts; wget -q -O - http://` + ns.IPAddress + `:8080/`
	r := docker(t, "run", "--rm", "--name", cli, "--hostname", "client", img, "sh", "-c", script)
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	if r.Code != 0 || len(lines) != 4 {
		t.Fatalf("client: %+v", r)
	}
	cm := regexp.MustCompile(`^(10\.123\.0\.\d+)/16$`).FindStringSubmatch(lines[0])
	if cm == nil || cm[1] == ns.IPAddress {
		t.Errorf("client address %q: want another 10.123.0.x/16", lines[0])
	}
	if !strings.HasPrefix(lines[1], "default via 10.123.0.1 dev eth0") {
		t.Errorf("client route %q", lines[1])
	}
	if cm != nil && lines[2] != cm[1]+"\tclient" {
		t.Errorf("client's last /etc/hosts line %q, want %q", lines[2], cm[1]+"\tclient")
	}
	if lines[3] != "hello from srv" {
		t.Errorf("client fetched %q from the server by address", lines[3])
	}

	mustDocker(t, "rm", "-f", srv)
	if _, err := httpGet(url); err == nil {
		t.Errorf("%s still answers after rm -f", url)
	}
	if taps := hostLinks(t, "hk"); len(taps) != 0 {
		t.Errorf("TAPs left after rm: %v", taps)
	}
}

// TestNetworkNoneAndHost: --network none has only lo; --network host is
// refused before any VM boots.
func TestNetworkNoneAndHost(t *testing.T) {
	s := requireSuite(t)
	img := pulled(t, testimages.Busybox)
	r := docker(t, "run", "--rm", "--network", "none", img, "sh", "-c", "ls /sys/class/net; cat /etc/hosts")
	want := "lo\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n"
	if r != (result{Stdout: want}) {
		t.Errorf("--network none: %+v, want stdout %q", r, want)
	}
	// The CLI takes the 404 for a missing image, pulls, and tries again.
	r = docker(t, "run", "--rm", "--network", "nope", img, "true")
	if r.Code != 125 || !strings.HasSuffix(r.Stderr, "docker: Error response from daemon: network nope not found\n\nRun 'docker run --help' for more information\n") {
		t.Errorf("--network nope = %+v, want exit 125 and \"network nope not found\"", r)
	}
	if s.Kind != "huskd" {
		return
	}
	want2 := result{Stderr: "docker: Error response from daemon: husk does not support --network host: every container is a VM with its own network stack\n\nRun 'docker run --help' for more information\n", Code: 125}
	if r := docker(t, "run", "--rm", "--network", "host", img, "true"); r != want2 {
		t.Errorf("--network host = %+v, want %+v", r, want2)
	}
	// So are the other namespaces a VM cannot share.
	for _, args := range [][]string{{"--pid", "host"}, {"--pid", "container:other"}, {"--ipc", "host"}, {"--ipc", "container:other"}, {"--uts", "host"}} {
		mode, _, _ := strings.Cut(args[1], ":")
		if mode == "container" {
			mode = "container:<name>"
		}
		want := result{Stderr: "docker: Error response from daemon: husk does not support " + args[0] + " " + mode + ": every container is a VM with its own kernel\n\nRun 'docker run --help' for more information\n", Code: 125}
		if r := docker(t, append(append([]string{"run", "--rm"}, args...), img, "true")...); r != want {
			t.Errorf("%q = %+v, want %+v", args, r, want)
		}
	}
}

// TestPublishSurvivesDaemonCrash: after kill -9 of the daemon, a running
// container's published port listens again; after a clean daemon stop
// (which stops containers) no TAP is left.
func TestPublishSurvivesDaemonCrash(t *testing.T) {
	requireBridge(t)
	img := pulled(t, testimages.Busybox)
	srv := containerName(t, "")
	mustDocker(t, append([]string{"run", "-d", "--name", srv, "-p", "127.0.0.1::8080", "-P", "--expose", "9000", img}, webServer("crash")...)...)
	ports := inspectNet(t, srv).NetworkSettings.Ports
	if p := ports["9000/tcp"]; len(ports["8080/tcp"]) != 1 || len(p) != 2 || p[0].HostIp != "0.0.0.0" || p[1].HostIp != "::" || p[0].HostPort != p[1].HostPort {
		t.Fatalf("ports = %+v, want 8080 on 127.0.0.1 and -P's 9000 on 0.0.0.0 and [::] at one port", ports)
	}
	url := "http://127.0.0.1:" + ports["8080/tcp"][0].HostPort + "/"
	eventually(t, "published port answers", func() string {
		if body, err := httpGet(url); err != nil || body != "hello from crash\n" {
			return fmt.Sprintf("%q, %v", body, err)
		}
		return ""
	})
	taps := hostLinks(t, "hk")
	if len(taps) != 1 {
		t.Fatalf("TAPs while running: %v, want one", taps)
	}

	crashDaemon(t)

	if got := inspectNet(t, srv).NetworkSettings.Ports; !reflect.DeepEqual(got, ports) {
		t.Errorf("ports after the crash = %+v, want %+v", got, ports)
	}
	if body, err := httpGet(url); err != nil || body != "hello from crash\n" {
		t.Errorf("after the daemon crash: %q, %v", body, err)
	}
	if got := hostLinks(t, "hk"); strings.Join(got, " ") != strings.Join(taps, " ") {
		t.Errorf("TAPs after the crash = %v, want %v", got, taps)
	}

	restartDaemon(t)

	if got := mustDocker(t, "inspect", "-f", "{{.State.Status}}", srv); got != "exited\n" {
		t.Errorf("after a clean restart the container is %q, want exited", got)
	}
	if got := hostLinks(t, "hk"); len(got) != 0 {
		t.Errorf("TAPs after the daemon stopped its container: %v", got)
	}
	if _, err := httpGet(url); err == nil {
		t.Errorf("%s answers after the container stopped", url)
	}
	mustDocker(t, "rm", srv)
}

// reachScript prints whether a TCP connection to ip:8080 succeeds and
// whether the name of the server container resolves. (busybox's wget -T
// crashes on a failed connection, so nc it is.)
func reachScript(ip string) string {
	return "if echo | nc -w 5 " + ip + " 8080 >/dev/null; then echo reached; else echo blocked; fi; " +
		"if nslookup web >/dev/null 2>&1; then echo resolved; else echo unknown; fi"
}

// TestUserNetworks: containers on a user-defined network reach each
// other by name and alias through huskd's DNS; another network cannot
// reach them even with forwarding on; networks are listed, inspected,
// connected, pruned and removed, leaving no bridge.
func TestUserNetworks(t *testing.T) {
	requireBridge(t)
	img := pulled(t, testimages.Busybox)
	netA, netB, netC := namePrefix(t)+"-a", namePrefix(t)+"-b", namePrefix(t)+"-c"
	t.Cleanup(func() {
		for _, n := range []string{netA, netB, netC} {
			cmd := exec.Command(suite.DockerCLI, "network", "rm", n)
			cmd.Env = dockerEnv()
			_ = cmd.Run()
		}
	})
	idA := strings.TrimSpace(mustDocker(t, "network", "create", "--label", "e2e=1", netA))
	mustDocker(t, "network", "create", netB)
	if r := docker(t, "network", "create", netA); r.Code != 1 || r.Stderr != "Error response from daemon: network with name "+netA+" already exists\n" {
		t.Errorf("duplicate create = %+v", r)
	}
	if out := mustDocker(t, "network", "ls", "--filter", "label=e2e=1", "--format", "{{.ID}} {{.Name}} {{.Driver}} {{.Scope}}"); out != idA[:12]+" "+netA+" bridge local\n" {
		t.Errorf("network ls = %q", out)
	}

	srv := containerName(t, "-srv")
	mustDocker(t, append([]string{"run", "-d", "--name", srv, "--network", netA, "--network-alias", "web", img}, webServer("srv")...)...)
	srvIP := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{(index .NetworkSettings.Networks \""+netA+"\").IPAddress}}", srv))
	if !regexp.MustCompile(`^10\.12[4-7]\.\d+\.\d+$`).MatchString(srvIP) {
		t.Fatalf("server address on %s = %q", netA, srvIP)
	}
	var ins []struct {
		Containers map[string]struct{ Name, IPv4Address string }
	}
	if err := json.Unmarshal([]byte(mustDocker(t, "network", "inspect", netA)), &ins); err != nil || len(ins) != 1 {
		t.Fatalf("network inspect: %v", err)
	}
	if len(ins[0].Containers) != 1 {
		t.Errorf("network inspect Containers = %+v", ins[0].Containers)
	}
	for _, c := range ins[0].Containers {
		if c.Name != srv || !strings.HasPrefix(c.IPv4Address, srvIP+"/") {
			t.Errorf("network inspect container = %+v, want %s at %s", c, srv, srvIP)
		}
	}

	r := docker(t, "run", "--rm", "--network", netA, img, "sh", "-c",
		"wget -q -O - http://"+srv+":8080/ && wget -q -O - http://web:8080/ && grep nameserver /etc/resolv.conf && "+reachScript(srvIP))
	// The embedded DNS is at 127.0.0.11, as under dockerd.
	if want := "hello from srv\nhello from srv\nnameserver 127.0.0.11\nreached\nresolved\n"; r.Stdout != want || r.Code != 0 {
		t.Errorf("client on the same network: %+v, want stdout %q", r, want)
	}

	// With forwarding on in the namespace, only husk's rules keep the
	// networks apart.
	if out, err := exec.Command("ip", "netns", "exec", suite.Netns, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		t.Fatalf("enable forwarding in the test netns: %v: %s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "exec", suite.Netns, "sysctl", "-qw", "net.ipv4.ip_forward=0").Run()
	})
	r = docker(t, "run", "--rm", "--network", netB, img, "sh", "-c", reachScript(srvIP))
	if r.Stdout != "blocked\nunknown\n" {
		t.Errorf("client on another network: %+v, want blocked and unknown", r)
	}

	if r := docker(t, "network", "rm", netA); r.Code != 1 || !strings.Contains(r.Stderr, "has active endpoints") {
		t.Errorf("network rm while in use = %+v", r)
	}
	if r := docker(t, "network", "rm", "bridge"); r.Code != 1 || !strings.HasPrefix(r.Stderr, "Error response from daemon: bridge is a pre-defined network and cannot be removed\n") {
		t.Errorf("network rm bridge = %+v", r)
	}

	// connect/disconnect change a stopped container's networks.
	idle := containerName(t, "-idle")
	mustDocker(t, "create", "--name", idle, img, "true")
	mustDocker(t, "network", "connect", netB, idle)
	if out := mustDocker(t, "inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", idle); out != "bridge "+netB+" \n" {
		t.Errorf("networks after connect = %q", out)
	}
	if r := docker(t, "network", "connect", netA, srv); r.Code != 1 || r.Stderr != "Error response from daemon: endpoint with name "+srv+" already exists in network "+netA+"\n" {
		t.Errorf("connect a running container to its own network = %+v", r)
	}
	mustDocker(t, "network", "disconnect", netB, idle)
	if out := mustDocker(t, "inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", idle); out != "bridge \n" {
		t.Errorf("networks after disconnect = %q", out)
	}
	mustDocker(t, "rm", idle)

	mustDocker(t, "rm", "-f", srv)
	mustDocker(t, "network", "create", netC)
	out := mustDocker(t, "network", "prune", "-f")
	for _, n := range []string{netA, netB, netC} {
		if !strings.Contains(out, n+"\n") {
			t.Errorf("network prune output %q does not name %s", out, n)
		}
	}
	if got := mustDocker(t, "network", "ls", "--format", "{{.Name}}"); got != "bridge\nnone\n" {
		t.Errorf("networks after prune = %q", got)
	}
	if got := hostLinks(t, "husk-"); len(got) != 0 {
		t.Errorf("bridges left after prune: %v", got)
	}
}

// TestLinks: legacy --link on the default bridge. The linked container
// must exist at create and run at start; the linking one then resolves it
// under the alias, its hostname and its name through /etc/hosts, and gets
// dockerd's ALIAS_* variables for its address, exposed ports and
// environment, its own -e winning over them.
func TestLinks(t *testing.T) {
	requireBridge(t)
	img := pulled(t, testimages.Busybox)
	target := containerName(t, "-db")
	mustDocker(t, "run", "-d", "--name", target, "--expose", "5432", "-e", "FOO=bar", img, "sleep", "1000")
	ip := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.NetworkSettings.IPAddress}}", target))
	id := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", target))[:12]
	linker := containerName(t, "-web")
	out := mustDocker(t, "run", "--rm", "--name", linker, "--link", target+":db", "-e", "DB_ENV_FOO=mine", img, "sh", "-c",
		"grep -w db /etc/hosts; env | grep ^DB_ | sort")
	// One line, as dockerd writes it: alias, hostname, name.
	want := ip + "\tdb " + id + " " + target + "\n" +
		"DB_ENV_FOO=mine\n" +
		"DB_NAME=/" + linker + "/db\n" +
		"DB_PORT=tcp://" + ip + ":5432\n" +
		"DB_PORT_5432_TCP=tcp://" + ip + ":5432\n" +
		"DB_PORT_5432_TCP_ADDR=" + ip + "\n" +
		"DB_PORT_5432_TCP_PORT=5432\n" +
		"DB_PORT_5432_TCP_PROTO=tcp\n"
	if out != want {
		t.Errorf("the linking container sees\n%s\nwant\n%s", out, want)
	}
	// An exec gets the links' variables too, and inspect names the link
	// as dockerd stores it.
	mustDocker(t, "run", "-d", "--name", linker, "--link", target+":db", "-e", "DB_ENV_FOO=mine", img, "sleep", "1000")
	envWant := want[strings.Index(want, "DB_ENV"):]
	if got := mustDocker(t, "exec", linker, "sh", "-c", "env | grep ^DB_ | sort"); got != envWant {
		t.Errorf("an exec in the linking container sees\n%s\nwant\n%s", got, envWant)
	}
	if got, want := mustDocker(t, "inspect", "-f", "{{json .HostConfig.Links}}", linker), `["/`+target+`:/`+linker+`/db"]`+"\n"; got != want {
		t.Errorf("HostConfig.Links = %s, want %s", got, want)
	}
	mustDocker(t, "rename", target, target+"-renamed")
	if got, want := mustDocker(t, "inspect", "-f", "{{json .HostConfig.Links}}", linker), `["/`+target+`-renamed:/`+linker+`/db"]`+"\n"; got != want {
		t.Errorf("HostConfig.Links after the target's rename = %s, want %s", got, want)
	}
	// The link follows its target: a restart finds it under its new name.
	mustDocker(t, "restart", "-t", "0", linker)
	lookup := "awk -v h=" + target + "-renamed '{for (i = 2; i <= NF; i++) if ($i == h) print $1}' /etc/hosts"
	if got := mustDocker(t, "exec", linker, "sh", "-c", lookup); got != ip+"\n" {
		t.Errorf("the linker's hosts file after the target's rename and a restart gives %s-renamed %q, want %q", target, got, ip+"\n")
	}
	mustDocker(t, "rename", target+"-renamed", target)
	mustDocker(t, "rm", "-f", linker)

	mustDocker(t, "stop", "-t", "0", target)
	r := docker(t, "run", "--rm", "--name", linker, "--link", target+":db", img, "true")
	if want := "Cannot link to a non running container: /" + target + " AS /" + linker + "/db"; r.Code != 125 || !strings.Contains(r.Stderr, want) {
		t.Errorf("link to a stopped container: exit %d, %q; want 125 and %q", r.Code, r.Stderr, want)
	}
	r = docker(t, "run", "--rm", "--link", "e2e-no-such-container:db", img, "true")
	if want := "could not get container for e2e-no-such-container: No such container: e2e-no-such-container"; r.Code != 125 || !strings.Contains(r.Stderr, want) {
		t.Errorf("link to a missing container: exit %d, %q; want 125 and %q", r.Code, r.Stderr, want)
	}
	mustDocker(t, "rm", "-f", target)
}

// TestHostGateway: a port published without a host address is bound on
// 0.0.0.0 and [::], as dockerd binds it; --add-host NAME:host-gateway
// names the host, as dockerd's does (the default bridge's address, from
// any network): a container on a network of its own reaches the port
// another container published on the host through it.
func TestHostGateway(t *testing.T) {
	requireBridge(t)
	img := pulled(t, testimages.Busybox)
	srv := containerName(t, "-srv")
	mustDocker(t, append([]string{"run", "-d", "--name", srv, "-p", "8080", img}, webServer("srv")...)...)
	bound := inspectNet(t, srv).NetworkSettings.Ports["8080/tcp"]
	if len(bound) != 2 || bound[0].HostIp != "0.0.0.0" || bound[1].HostIp != "::" || bound[0].HostPort != bound[1].HostPort {
		t.Fatalf("Ports[8080/tcp] = %+v, want 0.0.0.0 and [::] at one port, as dockerd binds -p 8080", bound)
	}
	hostPort := bound[0].HostPort
	for _, url := range []string{"http://127.0.0.1:" + hostPort + "/", "http://[::1]:" + hostPort + "/"} {
		eventually(t, url+" answers", func() string {
			if body, err := httpGet(url); err != nil || body != "hello from srv\n" {
				return fmt.Sprintf("%q, %v", body, err)
			}
			return ""
		})
	}
	if out := mustDocker(t, "port", srv); out != "8080/tcp -> 0.0.0.0:"+hostPort+"\n8080/tcp -> [::]:"+hostPort+"\n" {
		t.Errorf("docker port = %q", out)
	}
	netName := containerName(t, "-net")
	mustDocker(t, "network", "create", netName)
	t.Cleanup(func() { docker(t, "network", "rm", netName) })
	out := mustDocker(t, "run", "--rm", "--network", netName, "--add-host", "host.docker.internal:host-gateway", img, "sh", "-c",
		"grep -w host.docker.internal /etc/hosts; wget -q -O - http://host.docker.internal:"+hostPort+"/")
	if want := "10.123.0.1\thost.docker.internal\nhello from srv\n"; out != want {
		t.Errorf("a container with --add-host host.docker.internal:host-gateway sees\n%s\nwant\n%s", out, want)
	}
	mustDocker(t, "rm", "-f", srv)
}

// TestAuxAddresses: a network's --aux-address is shown by inspect and
// never handed to a container. The gateway (.1) was not given, so inspect
// leaves it out, as dockerd does. Asking for one with --ip fails the start
// in dockerd's words, and a --rm container whose start failed so is
// removed (the CLI waits for that), where it used to hang the CLI.
func TestAuxAddresses(t *testing.T) {
	requireBridge(t)
	img := pulled(t, testimages.Busybox)
	nw := namePrefix(t)
	t.Cleanup(func() { docker(t, "network", "rm", nw) })
	mustDocker(t, "network", "create", "--subnet", "10.87.0.0/24", "--aux-address", "router=10.87.0.2", "--aux-address", "dns=10.87.0.3", nw)
	if got, want := mustDocker(t, "network", "inspect", "-f", "{{json .IPAM.Config}}", nw), `[{"Subnet":"10.87.0.0/24","AuxiliaryAddresses":{"dns":"10.87.0.3","router":"10.87.0.2"}}]`+"\n"; got != want {
		t.Errorf("IPAM config = %s, want %s", got, want)
	}
	if out := mustDocker(t, "run", "--rm", "--network", nw, img, "sh", "-c", "ip -4 -o addr show eth0 | awk '{print $4}'"); out != "10.87.0.4/24\n" {
		t.Errorf("a container got %q, want 10.87.0.4/24, the first address past the aux ones", out)
	}
	name := containerName(t, "-rm")
	r := docker(t, "run", "--rm", "--name", name, "--network", nw, "--ip", "10.87.0.2", img, "true")
	if r.Code != 125 || !strings.Contains(r.Stderr, "Error response from daemon: Address already in use\n") {
		t.Errorf("run --ip of an aux address: %+v, want exit 125 and dockerd's error", r)
	}
	if out := mustDocker(t, "ps", "-a", "-q", "--filter", "name=^"+name+"$"); out != "" {
		t.Errorf("the --rm container whose start failed is still there: %q", out)
	}
}
