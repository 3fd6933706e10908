package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

func TestRestartPolicies(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	inspectF := func(name, format string) string {
		return strings.TrimSpace(mustDocker(t, "inspect", "-f", format, name))
	}

	// on-failure:2 — two restarts after failures, then it stays down.
	failing := containerName(t, "-failing")
	mustDocker(t, "run", "-d", "--restart", "on-failure:2", "--name", failing, img, "sh", "-c", "echo x; exit 3")
	if got := inspectF(failing, "{{.HostConfig.RestartPolicy.Name}}:{{.HostConfig.RestartPolicy.MaximumRetryCount}}"); got != "on-failure:2" {
		t.Errorf("restart policy in inspect = %q", got)
	}
	eventually(t, "on-failure:2 gave up", func() string {
		if got := inspectF(failing, "{{.RestartCount}} {{.State.Status}} {{.State.ExitCode}}"); got != "2 exited 3" {
			return got
		}
		return ""
	})
	if got := mustDocker(t, "logs", failing); got != "x\nx\nx\n" {
		t.Errorf("logs of three runs = %q", got)
	}

	// always — restarts after a clean exit too, until stopped.
	always := containerName(t, "-always")
	mustDocker(t, "run", "-d", "--restart", "always", "--name", always, img, "sh", "-c", "echo y; exit 0")
	eventually(t, "always restarted twice", func() string {
		if n, _ := strconv.Atoi(inspectF(always, "{{.RestartCount}}")); n < 2 {
			return "restart count " + strconv.Itoa(n)
		}
		return ""
	})
	mustDocker(t, "stop", always)
	if got := inspectF(always, "{{.State.Status}} {{.State.Restarting}}"); got != "exited false" {
		t.Errorf("after stopping an always container: %q", got)
	}

	// Across a daemon restart: the daemon stops its containers when it
	// shuts down; on start it brings back always (even if stopped by hand)
	// and unless-stopped (unless stopped by hand), and nothing else. As
	// with dockerd, they are running by the time the daemon answers.
	unless := containerName(t, "-unless")
	alwaysStopped := containerName(t, "-always-stopped")
	unlessStopped := containerName(t, "-unless-stopped")
	plain := containerName(t, "-plain")
	mustDocker(t, "run", "-d", "--restart", "unless-stopped", "--name", unless, img, "sleep", "1000")
	mustDocker(t, "run", "-d", "--restart", "always", "--name", alwaysStopped, img, "sleep", "1000")
	mustDocker(t, "run", "-d", "--restart", "unless-stopped", "--name", unlessStopped, img, "sleep", "1000")
	mustDocker(t, "run", "-d", "--name", plain, img, "sleep", "1000")
	mustDocker(t, "stop", "-t", "0", alwaysStopped, unlessStopped)
	restartDaemon(t)
	want := map[string]string{unless: "running", alwaysStopped: "running", unlessStopped: "exited", plain: "exited"}
	for name, status := range want {
		if got := inspectF(name, "{{.State.Status}}"); got != status {
			t.Errorf("right after the daemon restarted, %s is %s, want %s", name, got, status)
		}
	}
	mustDocker(t, "rm", "-f", failing, always, unless, alwaysStopped, unlessStopped, plain)
}
