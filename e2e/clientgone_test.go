package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// hangUpAfter sends one API request to the daemon at host and closes the
// connection without reading the answer, as a client that is interrupted
// or times out right after asking does.
func hangUpAfter(t *testing.T, host, method, path string) {
	t.Helper()
	c, err := net.Dial("unix", strings.TrimPrefix(host, "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: docker\r\nContent-Length: 0\r\n\r\n", method, path); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
}

// daemonAt is a daemon the suite's docker CLI can reach.
type daemonAt struct{ kind, host string }

// underTestAndReference is the daemon under test and, when that is huskd
// and the supervisor runs one, the reference dockerd, for tests that hold
// both to the same behaviour.
func underTestAndReference(t *testing.T) []daemonAt {
	t.Helper()
	daemons := []daemonAt{{string(suite.Kind), suite.DockerHost}}
	if suite.Kind == "huskd" {
		if refHost, err := referenceHost(t); err == nil {
			daemons = append(daemons, daemonAt{"dockerd", refHost})
		} else {
			t.Logf("huskd only: no reference dockerd: %v", err)
		}
	}
	return daemons
}

// mustCLIAt runs the docker CLI against d and returns its trimmed output,
// failing the test if it fails.
func mustCLIAt(t *testing.T, d daemonAt, args ...string) string {
	t.Helper()
	r := cliAt(t, d.host, nil, args...)
	if r.Code != 0 {
		t.Fatalf("docker %s on %s: exit %d: %s", strings.Join(args, " "), d.kind, r.Code, r.Stderr)
	}
	return strings.TrimSpace(r.Stdout)
}

// onEachDaemon runs test as a subtest against each daemon of
// underTestAndReference, with the suite's busybox image, img, pulled there.
func onEachDaemon(t *testing.T, test func(t *testing.T, d daemonAt, img string)) {
	t.Helper()
	img := pulled(t, testimages.Busybox)
	for _, d := range underTestAndReference(t) {
		t.Run(d.kind, func(t *testing.T) {
			pulledAt(t, d, img)
			test(t, d, img)
		})
	}
}

// nameAt is a container name unique to t (plus suffix) whose container is
// removed from d when t ends.
func nameAt(t *testing.T, d daemonAt, suffix string) string {
	n := namePrefix(t) + suffix
	t.Cleanup(func() { cliAt(t, d.host, nil, "rm", "-f", n) })
	return n
}

// pulledAt makes sure d has img, which the suite's registry serves.
func pulledAt(t *testing.T, d daemonAt, img string) {
	t.Helper()
	if r := cliAt(t, d.host, nil, "image", "inspect", img); r.Code != 0 {
		mustCLIAt(t, d, "pull", img)
	}
}

// TestClientGoneMidRequest: a container's start, stop and restart are
// carried out even when the client hangs up right after asking. dockerd
// carries them out (its daemon's calls for them take no context), and
// clients count on it: an interrupted `docker stop` still stops the
// container, a start whose client timed out still starts it. It runs
// against the reference dockerd too when the supervisor has one.
func TestClientGoneMidRequest(t *testing.T) {
	requireSuite(t)
	onEachDaemon(t, func(t *testing.T, d daemonAt, img string) {
		name := func(suffix string) string { return nameAt(t, d, suffix) }
		state := func(n string) string {
			return mustCLIAt(t, d, "inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", n)
		}

		started := name("-start")
		mustCLIAt(t, d, "create", "--name", started, img, "sleep", "600")
		hangUpAfter(t, d.host, "POST", "/containers/"+started+"/start")

		stopped := name("-stop")
		mustCLIAt(t, d, "run", "-d", "--name", stopped, img, "sleep", "600")
		hangUpAfter(t, d.host, "POST", "/containers/"+stopped+"/stop?t=1")

		restarted := name("-restart")
		mustCLIAt(t, d, "run", "-d", "--name", restarted, img, "sleep", "600")
		before := state(restarted)
		hangUpAfter(t, d.host, "POST", "/containers/"+restarted+"/restart?t=1")

		eventually(t, started+" started", func() string {
			if s := state(started); !strings.HasPrefix(s, "running ") {
				return s
			}
			return ""
		})
		eventually(t, stopped+" stopped", func() string {
			if s := state(stopped); !strings.HasPrefix(s, "exited ") {
				return s
			}
			return ""
		})
		eventually(t, restarted+" restarted", func() string {
			if s := state(restarted); !strings.HasPrefix(s, "running ") || s == before {
				return fmt.Sprintf("%s (before the restart: %s)", s, before)
			}
			return ""
		})
	})
}
