package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
	"github.com/husk-vm/husk/runtime/containers"
)

// templateReady is the log line of huskd's default template: one NIC.
func templateReady() string {
	return `msg="template ready" ` + shapeFields(1)
}

// shapeFields is how huskd's log names a template's shape: 256 MiB, the
// default vCPUs (the e2e daemon sets no --cpus), nics NICs.
func shapeFields(nics int) string {
	return fmt.Sprintf("memory_mib=256 cpus=%d nics=%d", containers.DefaultCPUs(), nics)
}

// poolReady is the log line of a VM made ready in huskd's pool for its
// default shape.
func poolReady() string {
	return fmt.Sprintf(`msg="pool VM ready" shape="256 MiB, %d CPUs, 1 NICs"`, containers.DefaultCPUs())
}

// waitTemplate waits until huskd says its default template (one NIC) is
// ready: it is built in the background after the daemon starts.
func waitTemplate(t *testing.T) {
	t.Helper()
	eventually(t, "huskd's default template is ready", func() string {
		b, err := os.ReadFile(suite.DaemonLog)
		if err != nil {
			return err.Error()
		}
		if !strings.Contains(string(b), templateReady()) {
			return "no \"template ready\" line for 256 MiB, the default vCPUs, 1 NIC in " + suite.DaemonLog
		}
		return ""
	})
}

// daemonLogHas reports whether the daemon's log has a line with every
// one of parts.
func daemonLogHas(t *testing.T, parts ...string) bool {
	t.Helper()
	b, err := os.ReadFile(suite.DaemonLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// templateRunScript prints what a container must see as its own: its
// first random bytes, env, image files, hostname (kernel and
// /etc/hostname), address and MAC; then it stays up so that inspect
// shows its network settings. The random bytes come first: VMs restored
// from one snapshot resume one RNG state, and only the reseed at their
// start tells their numbers apart.
const templateRunScript = `echo "rand=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"; ` +
	`echo "env=$X"; test -x /bin/busybox && grep -q '^app:' /etc/passwd && echo files-ok; ` +
	`echo "host=$(hostname) etc=$(cat /etc/hostname)"; ip -4 -o addr show eth0 | awk '{print "addr=" $4}'; ` +
	`ip link show eth0 | awk '/ether/ {print "mac=" $2}'; echo done; exec sleep 600`

// checkRunIdentity waits until a container running templateRunScript has
// said who it is, checks that it saw its own environment, the image's files, its
// hostname, and the address and MAC inspect reports, and that no earlier
// container (recorded in seen) had the same hostname, address, MAC or
// random bytes. It returns the container's ID.
func checkRunIdentity(t *testing.T, name string, seen map[string]string) string {
	t.Helper()
	var logs string
	eventually(t, name+" has printed who it is", func() string {
		logs = docker(t, "logs", name).Stdout
		if !strings.Contains(logs, "done") {
			return "logs so far: " + logs
		}
		return ""
	})
	kv := parseKV(logs)
	ep := inspectNet(t, name).NetworkSettings
	id := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", name))
	hostname := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Config.Hostname}}", name))
	switch {
	case kv["env"] != name:
		t.Errorf("%s: env X=%q, want %q", name, kv["env"], name)
	case !strings.Contains(logs, "files-ok"):
		t.Errorf("%s: the image's files are not visible: %q", name, logs)
	case kv["host"] != hostname || kv["etc"] != hostname:
		t.Errorf("%s: hostname %q, /etc/hostname %q, want %q", name, kv["host"], kv["etc"], hostname)
	case kv["addr"] != ep.IPAddress+"/16":
		t.Errorf("%s: guest address %q, inspect says %s/16", name, kv["addr"], ep.IPAddress)
	case !strings.EqualFold(kv["mac"], ep.MacAddress):
		t.Errorf("%s: guest MAC %q, inspect says %s", name, kv["mac"], ep.MacAddress)
	case len(kv["rand"]) != 32:
		t.Errorf("%s: read %q from /dev/urandom, want 16 bytes in hex", name, kv["rand"])
	}
	for _, k := range []string{"host", "addr", "mac", "rand"} {
		if other, dup := seen[k+"="+kv[k]]; dup {
			t.Errorf("%s and %s share %s %s", other, name, k, kv[k])
		}
		seen[k+"="+kv[k]] = name
	}
	return id
}

// runTwoAtOnce starts two containers of img running templateRunScript
// at once, checks each one's identity (checkRunIdentity), removes them
// and returns their IDs by name.
func runTwoAtOnce(t *testing.T, img string) map[string]string {
	t.Helper()
	names := []string{containerName(t, "-a"), containerName(t, "-b")}
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			docker(t, "run", "-d", "--name", name, "-e", "X="+name, img, "sh", "-c", templateRunScript)
		}()
	}
	wg.Wait()
	seen, ids := map[string]string{}, map[string]string{}
	for _, name := range names {
		ids[name] = checkRunIdentity(t, name, seen)
		mustDocker(t, "rm", "-f", name)
	}
	return ids
}

func parseKV(out string) map[string]string {
	kv := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
	}
	return kv
}

// TestTemplateRun: with huskd's template ready, two containers started
// at once come from it (the daemon log says so), see the image's files,
// their env and exit code, and each its own hostname, MAC and address,
// which match what inspect reports; a container started from a template
// can be checkpointed and restored; and a container that asks to boot
// cold, or whose shape has no template yet, still runs.
func TestTemplateRun(t *testing.T) {
	requireBridge(t)
	img := pulled(t, testimages.Busybox)
	waitTemplate(t)

	for name, id := range runTwoAtOnce(t, img) {
		if !daemonLogHas(t, "container VM restored from a template", "id="+id[:12]) {
			t.Errorf("%s (%s) was not started from a template", name, id[:12])
		}
	}
	// The exit code comes back to an attached client.
	if r := docker(t, "run", "--rm", img, "sh", "-c", "exit 7"); r.Code != 7 {
		t.Errorf("docker run --rm ... exit 7: exit %d (stderr %q)", r.Code, r.Stderr)
	}

	// A container started from a template checkpoints and restores.
	long := containerName(t, "-ck")
	mustDocker(t, "run", "-d", "--name", long, img, "sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.2; done")
	mustDocker(t, "checkpoint", "create", long, "cp")
	mustDocker(t, "start", "--checkpoint", "cp", long)
	if got := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Running}}", long)); got != "true" {
		t.Fatalf("%s after restore: running %s", long, got)
	}
	mustDocker(t, "rm", "-f", long)

	// Fallbacks: asked to boot cold; no template for this shape yet (a
	// memory size no other test uses), which also starts building one.
	cold := containerName(t, "-cold")
	if r := docker(t, "run", "--name", cold, "--label", "io.husk.boot=cold", img, "sh", "-c", "test -x /bin/busybox && exit 3"); r.Code != 3 {
		t.Fatalf("cold boot: exit %d, want 3 (stderr %q)", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", cold))
	if !daemonLogHas(t, "booting cold", "id="+id[:12], "io.husk.boot=cold") {
		t.Errorf("no debug line saying %s booted cold because of its label", id[:12])
	}
	other := containerName(t, "-199m")
	if r := docker(t, "run", "--name", other, "--memory", "199m", img, "sh", "-c", "test -x /bin/busybox && exit 4"); r.Code != 4 {
		t.Fatalf("--memory 199m: exit %d, want 4 (stderr %q)", r.Code, r.Stderr)
	}
	id = strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", other))
	// The VM holds the limit and the guest's overhead (80 MiB and 1/64).
	if !daemonLogHas(t, "booting cold", "id="+id[:12], "no template yet for 282 MiB") {
		t.Errorf("no debug line saying why %s booted cold", id[:12])
	}
}
