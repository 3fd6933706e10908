package e2e

import (
	"context"
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
