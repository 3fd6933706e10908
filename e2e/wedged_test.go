package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
)

// TestKillWedgedGuest: docker kill, docker stop and docker rm -f of a
// container whose guest no longer answers, paused or not, end it all the
// same, as dockerd's SIGKILL does not wait on the container: huskd gives
// the agent a few seconds to deliver the signal (or to thaw a paused
// container's processes first), then kills the VM, and the exit is
// recorded as that SIGKILL's (137). The test wedges the guest by stopping
// its vCPUs through QEMU's monitor, behind huskd's back.
func TestKillWedgedGuest(t *testing.T) {
	requireQEMUDaemon(t)
	img := pulled(t, testimages.Busybox)
	for _, tc := range []struct {
		name    string
		args    []string
		paused  bool // docker pause comes before the wedge
		removed bool
	}{
		{"kill", []string{"kill"}, false, false},
		{"stop", []string{"stop", "-t", "1"}, false, false},
		{"rm -f", []string{"rm", "-f"}, false, true},
		{"kill paused", []string{"kill"}, true, false},
		{"rm -f paused", []string{"rm", "-f"}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := containerName(t, "")
			id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img, "sleep", "600"))
			short := id[:12]
			if tc.paused {
				mustDocker(t, "pause", name)
			}
			if err := vmQMP(context.Background(), suite.DaemonRoot, id, "stop", nil, nil); err != nil {
				t.Fatalf("stop %s's vCPUs: %v", short, err)
			}

			if r := docker(t, append(tc.args, name)...); r.Code != 0 || strings.TrimSpace(r.Stdout) != name {
				t.Fatalf("docker %s of a wedged guest: %+v", tc.name, r)
			}
			killed := "agent could not deliver SIGKILL; killing the VM"
			if tc.paused {
				killed = "could not unpause the container to kill it; killing the VM"
			}
			if !daemonLogHas(t, killed, "id="+short) {
				t.Errorf("no line saying the daemon killed %s's VM", short)
			}
			eventually(t, "the wedged guest's QEMU gone", func() string {
				if ps, err := harness.ProcessesMentioning("process=husk-" + short); err != nil || len(ps) != 0 {
					return "a QEMU of " + short + " still runs"
				}
				return ""
			})
			if tc.removed {
				if r := docker(t, "inspect", name); r.Code == 0 || !strings.Contains(r.Stderr, "No such object") {
					t.Errorf("docker inspect after rm -f: %+v, want no such object", r)
				}
				return
			}
			state := mustDocker(t, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}} [{{.State.Error}}]", name)
			if got, want := strings.TrimSpace(state), "exited 137 []"; got != want {
				t.Errorf("%s after docker %s: %q, want %q", name, tc.name, got, want)
			}
			if daemonLogHas(t, "lost the container's main process", "id="+short) {
				t.Errorf("the daemon says it lost %s's process, which it killed", short)
			}
			// The container starts again, in a fresh VM.
			if out := mustDocker(t, "start", name); strings.TrimSpace(out) != name {
				t.Errorf("docker start after docker %s: %q", tc.name, out)
			}
			mustDocker(t, "rm", "-f", name)
		})
	}
}

// TestChangesToWedgedGuest: changes to a container whose guest no longer
// answers end within seconds, where they used to hold the container's
// lock, and with it every docker ps, for as long as the guest was
// wedged. docker pause pauses it all the same, by stopping its VM's
// vCPUs. A checkpoint, or docker update of its pids limit, fails and
// leaves it running, and what its guest does once it runs again is
// undone. Either way the container's processes run again afterwards. The
// test wedges the guest by stopping its vCPUs through QEMU's monitor,
// behind huskd's back.
func TestChangesToWedgedGuest(t *testing.T) {
	requireQEMUDaemon(t)
	img := pulled(t, testimages.Busybox)
	for _, tc := range []struct {
		name string
		// wedged runs the operation on the wedged container, asserts
		// its outcome and gets the guest running again.
		wedged func(t *testing.T, name, id string)
	}{
		{"pause", func(t *testing.T, name, id string) {
			mustDocker(t, "pause", name)
			if !daemonLogHas(t, "the guest did not answer the freeze; stopping its VM's vCPUs instead", "id="+id[:12]) {
				t.Errorf("no line saying the daemon stopped %s's vCPUs", id[:12])
			}
			if got := mustDocker(t, "ps", "--filter", "id="+id, "--format", "{{.Status}}"); !strings.Contains(got, "(Paused)") {
				t.Errorf("docker ps after the pause: %q, want it paused", got)
			}
			mustDocker(t, "unpause", name)
		}},
		{"checkpoint", func(t *testing.T, name, id string) {
			refusedThenUndone(t, name, id, []string{"checkpoint", "create", "--leave-running", name, "cp"},
				"{{.State.Status}}", "running", "the guest answered a freeze late; thawing its processes")
		}},
		{"update", func(t *testing.T, name, id string) {
			refusedThenUndone(t, name, id, []string{"update", "--pids-limit", "50", name},
				"{{.HostConfig.PidsLimit}}", "<nil>", "the guest set limits late; setting the recorded ones back")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := containerName(t, "")
			id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img,
				"sh", "-c", "while :; do date >> /tmp/beats; sleep 1; done"))
			eventually(t, "the first beat", func() string {
				if beats(t, name) < 1 {
					return "no beat yet"
				}
				return ""
			})
			if err := vmQMP(context.Background(), suite.DaemonRoot, id, "stop", nil, nil); err != nil {
				t.Fatalf("stop %s's vCPUs: %v", id[:12], err)
			}
			tc.wedged(t, name, id)
			// Beats go on: the processes are not left frozen.
			n := beats(t, name)
			eventually(t, "two more beats", func() string {
				if got := beats(t, name); got < n+2 {
					return fmt.Sprintf("%d beats, %d before", got, n)
				}
				return ""
			})
			mustDocker(t, "rm", "-f", name)
		})
	}
}

// refusedThenUndone runs docker args on the wedged container: it must
// fail for its agent's silence and leave inspect's format at want. The
// test then runs the guest again, which carries the change out late, and
// waits for the daemon's line (undone) saying it undid it.
func refusedThenUndone(t *testing.T, name, id string, args []string, format, want, undone string) {
	t.Helper()
	r := docker(t, args...)
	if r.Code == 0 || !strings.Contains(r.Stderr, "the guest's agent did not answer within") {
		t.Errorf("docker %s of a wedged guest: %+v, want the agent's silence", args[0], r)
	}
	if got := strings.TrimSpace(mustDocker(t, "inspect", "-f", format, name)); got != want {
		t.Errorf("after the failed %s, %s of %s is %s, want %s", args[0], format, name, got, want)
	}
	if err := vmQMP(context.Background(), suite.DaemonRoot, id, "cont", nil, nil); err != nil {
		t.Fatalf("resume %s's vCPUs: %v", id[:12], err)
	}
	eventually(t, "the late change undone", func() string {
		if !daemonLogHas(t, undone, "id="+id[:12]) {
			return fmt.Sprintf("no line %q for %s", undone, id[:12])
		}
		return ""
	})
}

// beats counts the lines the container's loop has written to /tmp/beats.
func beats(t *testing.T, name string) int {
	t.Helper()
	r := docker(t, "exec", name, "sh", "-c", "cat /tmp/beats 2>/dev/null | wc -l")
	n, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if r.Code != 0 || err != nil {
		t.Fatalf("count the beats: %+v", r)
	}
	return n
}

// TestCancelWedgedBuild: a docker build whose client goes away while a
// RUN's guest no longer answers ends all the same: the agent does not
// deliver the RUN's SIGKILL, so the build VM is killed, where it used to
// be left running, its RUN waited on for good. The test wedges the build
// VM by stopping its vCPUs through QEMU's monitor.
func TestCancelWedgedBuild(t *testing.T) {
	requireQEMUDaemon(t)
	base := pulled(t, testimages.Busybox)
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM " + base + "\nRUN echo run-began && sleep 600\n"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.DockerCLI, "build", dir)
	cmd.Env = append(dockerEnv(), "DOCKER_BUILDKIT=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for sc := bufio.NewScanner(out); ; {
		if !sc.Scan() {
			t.Fatalf("docker build ended before its RUN began: %v", sc.Err())
		}
		if sc.Text() == "run-began" {
			break
		}
	}
	socks, err := filepath.Glob(filepath.Join(suite.DaemonRoot, "builds", "vms", "*", "vm", "qmp.sock"))
	if err != nil || len(socks) != 1 {
		t.Fatalf("want one build VM, found %q (%v)", socks, err)
	}
	vmDir := filepath.Dir(socks[0])
	short := filepath.Base(filepath.Dir(vmDir))[:12]
	if err := dirQMP(ctx, vmDir, "stop", nil, nil); err != nil {
		t.Fatalf("stop the build VM's vCPUs: %v", err)
	}
	// The client goes away.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	eventually(t, "the wedged build VM's QEMU gone", func() string {
		if ps, err := harness.ProcessesMentioning("process=husk-" + short); err != nil || len(ps) != 0 {
			if !daemonLogHas(t, "build ended while a process ran; killing it", "vm="+short) {
				return "a QEMU of build VM " + short + " still runs, and the daemon has not logged the build's end"
			}
			return "a QEMU of build VM " + short + " still runs after the daemon logged the build's end"
		}
		return ""
	})
	if !daemonLogHas(t, "agent could not deliver SIGKILL to a build process; killing the build VM", "vm="+short) {
		t.Errorf("no line saying the daemon killed build VM %s", short)
	}
	eventually(t, "the build VM's directory gone", func() string {
		if _, err := os.Stat(filepath.Dir(vmDir)); !os.IsNotExist(err) {
			return "build VM " + short + "'s directory is still there"
		}
		return ""
	})
}
