package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

// TestReattachAfterDeathBesidePausedVM: huskd dies while a container's VM
// is paused, as it is during a checkpoint's snapshot, and the guest
// writes before the next huskd connects. QEMU then leaves the agent's
// channel throttled for good (see host.Reconnect), and a reattach that
// only waited on its first connection timed out and killed the
// container. The restarted daemon must reach the agent and the container
// must go on counting.
func TestReattachAfterDeathBesidePausedVM(t *testing.T) {
	requireHusk(t)
	if suite.VMM != "qemu" {
		t.Skipf("the stuck channel is QEMU's; the daemon runs %s", suite.VMM)
	}
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", counterScript))
	waitSteps(t, name, 2)

	ctx := context.Background()
	if err := vmQMP(ctx, suite.DaemonRoot, id, "stop", nil, nil); err != nil {
		t.Fatalf("pause the VM: %v", err)
	}
	start := killDaemon(t)
	// The close of the dead daemon's connection must reach QEMU while the
	// VM is stopped, which is when the port misses it.
	eventually(t, "QEMU saw the agent connection close", func() string {
		var chardevs []struct {
			Label    string `json:"label"`
			Filename string `json:"filename"`
		}
		if err := vmQMP(ctx, suite.DaemonRoot, id, "query-chardev", nil, &chardevs); err != nil {
			return err.Error()
		}
		for _, c := range chardevs {
			if c.Label == "agent" && strings.HasPrefix(c.Filename, "disconnected:") {
				return ""
			}
		}
		return "the agent chardev is still connected"
	})
	if err := vmQMP(ctx, suite.DaemonRoot, id, "cont", nil, nil); err != nil {
		t.Fatalf("resume the VM: %v", err)
	}
	// The loop prints every 0.3 s: its output is the guest's write into
	// the channel with no client on it.
	time.Sleep(1500 * time.Millisecond)
	start()

	if got := state(t, name); got != "running 0" {
		t.Fatalf("state after the restart = %q, want running", got)
	}
	n := len(steps(t, name))
	waitSteps(t, name, n+2)
}
