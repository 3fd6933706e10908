package e2e

import (
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// whoAmIServer serves, at /cgi-bin/id, the guest's hostname and eth0's
// IPv4 address as the guest itself sees them at request time, so that a
// restored copy shows whether it really took its own identity.
const whoAmIServer = `mkdir -p /www/cgi-bin && ` +
	`printf '#!/bin/sh\necho Content-Type: text/plain\necho\nhostname\nip -4 -o addr show eth0\n' > /www/cgi-bin/id && ` +
	`chmod +x /www/cgi-bin/id && exec httpd -f -p 8080 -h /www`

// whoAmI asks a container's published server who it is.
func whoAmI(t *testing.T, name string) (hostname, addrLine string) {
	t.Helper()
	bound := inspectNet(t, name).NetworkSettings.Ports["8080/tcp"]
	if len(bound) != 1 {
		t.Fatalf("%s: Ports[8080/tcp] = %+v, want one binding", name, bound)
	}
	url := "http://127.0.0.1:" + bound[0].HostPort + "/cgi-bin/id"
	var body string
	eventually(t, name+" answers on its published port", func() string {
		b, err := httpGet(url)
		if err != nil {
			return err.Error()
		}
		body = b
		return ""
	})
	lines := strings.SplitN(body, "\n", 3)
	if len(lines) < 2 {
		t.Fatalf("%s: answer %q, want hostname and address lines", name, body)
	}
	return lines[0], lines[1]
}

// runWhoAmI starts whoAmIServer, its port published, in a container on the
// default bridge named after the test and suffix, and checks that it
// answers with its hostname and address. It returns the container's name,
// hostname and network inspection.
func runWhoAmI(t *testing.T, suffix string) (name, hostname string, ins netInspected) {
	t.Helper()
	requireHusk(t)
	requireBridge(t)
	img := pulled(t, testimages.Busybox)
	name = containerName(t, suffix)
	mustDocker(t, "run", "-d", "--name", name, "-p", "127.0.0.1::8080", img, "sh", "-c", whoAmIServer)
	ins = inspectNet(t, name)
	hostname = strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Config.Hostname}}", name))
	if host, addr := whoAmI(t, name); host != hostname || !strings.Contains(addr, " "+ins.NetworkSettings.IPAddress+"/16 ") {
		t.Fatalf("%s answers %q / %q, want hostname %s and address %s", name, host, addr, hostname, ins.NetworkSettings.IPAddress)
	}
	return name, hostname, ins
}

// TestCheckpointForkIdentity: copies restored from one checkpoint of a
// container on the default bridge each get their own address, MAC,
// hostname and published port, and the guest itself answers with them.
func TestCheckpointForkIdentity(t *testing.T) {
	src, srcHostname, ins := runWhoAmI(t, "-src")
	srcNet := ins.NetworkSettings

	mustDocker(t, "checkpoint", "create", src, "cp")
	forks := huskFork(t, src, "cp", 2)

	seen := map[string]string{}
	for _, f := range forks {
		ns := inspectNet(t, f).NetworkSettings
		hostname := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Config.Hostname}}", f))
		if hostname == srcHostname {
			t.Errorf("fork %s kept the source's hostname %s", f, hostname)
		}
		if bridgeAddr.FindStringSubmatch(ns.IPAddress) == nil {
			t.Errorf("fork %s: IPAddress %q, want one on the default bridge", f, ns.IPAddress)
		}
		for what, v := range map[string]string{"address": ns.IPAddress, "MAC": ns.MacAddress, "hostname": hostname} {
			if other, dup := seen[what+v]; dup {
				t.Errorf("forks %s and %s share the %s %s", other, f, what, v)
			}
			seen[what+v] = f
		}
		// exec works in a restored copy, and sees the copy's identity.
		if out := mustDocker(t, "exec", f, "hostname"); strings.TrimSpace(out) != hostname {
			t.Errorf("docker exec %s hostname = %q, want %q", f, out, hostname)
		}
		if out := mustDocker(t, "exec", f, "cat", "/etc/hostname"); strings.TrimSpace(out) != hostname {
			t.Errorf("fork %s: /etc/hostname = %q, want %q", f, out, hostname)
		}
		gotHost, gotAddr := whoAmI(t, f)
		if gotHost != hostname {
			t.Errorf("fork %s: the guest says its hostname is %q, want %q", f, gotHost, hostname)
		}
		if !strings.Contains(gotAddr, " "+ns.IPAddress+"/16 ") {
			t.Errorf("fork %s: the guest's eth0 is %q, want address %s", f, gotAddr, ns.IPAddress)
		}
		if ns.IPAddress == srcNet.IPAddress && strings.Contains(gotAddr, srcNet.IPAddress) {
			continue // the source is stopped, so its address may be reused
		}
		if strings.Contains(gotAddr, " "+srcNet.IPAddress+"/") {
			t.Errorf("fork %s still holds the source's address: %q", f, gotAddr)
		}
	}

	// The source itself restores too, beside its forks, with an address
	// of its own.
	mustDocker(t, "start", "--checkpoint", "cp", src)
	ns := inspectNet(t, src).NetworkSettings
	if _, dup := seen["address"+ns.IPAddress]; dup {
		t.Errorf("restored source got address %s, which a running fork holds", ns.IPAddress)
	}
	gotHost, gotAddr := whoAmI(t, src)
	if gotHost != srcHostname || !strings.Contains(gotAddr, " "+ns.IPAddress+"/16 ") {
		t.Errorf("restored source answers %q / %q, want %s and %s", gotHost, gotAddr, srcHostname, ns.IPAddress)
	}
	t.Logf("forks: %v", forks)
}

// TestCheckpointRestoreKeepsIdentity: a checkpoint restored into its own
// container, which gets back its address and MAC (the agent then leaves
// the guest's network as it was), answers on its published port, with
// its hostname, twice over.
func TestCheckpointRestoreKeepsIdentity(t *testing.T) {
	name, hostname, ins := runWhoAmI(t, "")
	before := ins.NetworkSettings
	mustDocker(t, "checkpoint", "create", name, "cp")
	for round := range 2 {
		mustDocker(t, "start", "--checkpoint", "cp", name)
		ns := inspectNet(t, name).NetworkSettings
		t.Logf("restore %d: address %s (before %s), MAC %s (before %s)", round, ns.IPAddress, before.IPAddress, ns.MacAddress, before.MacAddress)
		gotHost, gotAddr := whoAmI(t, name)
		if gotHost != hostname || !strings.Contains(gotAddr, " "+ns.IPAddress+"/16 ") {
			t.Errorf("restore %d answers %q / %q, want %s and %s", round, gotHost, gotAddr, hostname, ns.IPAddress)
		}
		if out := mustDocker(t, "exec", name, "hostname"); strings.TrimSpace(out) != hostname {
			t.Errorf("restore %d: docker exec hostname = %q, want %q", round, out, hostname)
		}
		mustDocker(t, "kill", name)
	}
}

// TestCheckpointRefusesVolumes: a container with a bind mount cannot be
// checkpointed (virtiofsd's state is not in the VM snapshot), and says so;
// it keeps running.
func TestCheckpointRefusesVolumes(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, "-v", t.TempDir()+":/data", img, "sleep", "600")
	r := docker(t, "checkpoint", "create", name, "cp")
	if r.Code == 0 || !strings.Contains(r.Stderr, "bind mounts or volumes") {
		t.Errorf("checkpoint of a container with a bind mount = %+v, want a refusal naming the mounts", r)
	}
	if got := state(t, name); got != "running 0" {
		t.Errorf("after the refused checkpoint: %q, want running 0", got)
	}
	if got := mustDocker(t, "checkpoint", "ls", name); got != "CHECKPOINT NAME\n" {
		t.Errorf("checkpoint ls = %q, want no checkpoint", got)
	}
}
