package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
	"github.com/husk-vm/husk/runtime/containers"
)

// A container's clock is the host's under dockerd. A guest's is not
// unless husk sets it: a booted guest reads its RTC to the whole second,
// a restored one resumes its snapshot's clock. The guest's reading must
// fall between the host's readings before and after the exec, less the
// time its setting took to reach the guest (behind) and with nothing to
// spare ahead.
const (
	clockBehind = 250 * time.Millisecond
	clockAhead  = 50 * time.Millisecond
)

// TestGuestClock: a container's clock is the host's whether its VM was
// booted, restored from a template, paused for seconds, or restored from
// a checkpoint made seconds earlier.
func TestGuestClock(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)

	t.Run("cold boot", func(t *testing.T) {
		name := containerName(t, "")
		mustDocker(t, "run", "-d", "--name", name, "--label", containers.BootLabel+"=cold", img, "sleep", "600")
		checkGuestClock(t, name)
	})
	t.Run("template", func(t *testing.T) {
		waitTemplate(t)
		name := containerName(t, "")
		id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img, "sleep", "600"))
		if !daemonLogHas(t, "container VM restored from a template", "id="+id[:12]) {
			t.Fatalf("%s was not restored from a template", name)
		}
		checkGuestClock(t, name)
	})
	t.Run("unpause", func(t *testing.T) {
		name := containerName(t, "")
		mustDocker(t, "run", "-d", "--name", name, img, "sleep", "600")
		mustDocker(t, "pause", name)
		time.Sleep(2 * time.Second)
		mustDocker(t, "unpause", name)
		checkGuestClock(t, name)
	})
	t.Run("checkpoint", func(t *testing.T) {
		name := containerName(t, "")
		mustDocker(t, "run", "-d", "--name", name, img, "sleep", "600")
		mustDocker(t, "checkpoint", "create", name, "cp1")
		// Long enough that a clock resumed as it was would be caught.
		time.Sleep(2 * time.Second)
		mustDocker(t, "start", "--checkpoint", "cp1", name)
		checkGuestClock(t, name)
	})
}

// checkGuestClock reads name's clock with busybox adjtimex (to the
// microsecond) between two readings of the host's.
func checkGuestClock(t *testing.T, name string) {
	t.Helper()
	before := time.Now()
	out := mustDocker(t, "exec", name, "busybox", "adjtimex")
	after := time.Now()
	var sec, usec int64 = -1, -1
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		switch {
		case err != nil:
		case f[0] == "time.tv_sec:":
			sec = v
		case f[0] == "time.tv_usec:":
			usec = v
		}
	}
	if sec < 0 || usec < 0 {
		t.Fatalf("no time in adjtimex's output %q", out)
	}
	guest := time.Unix(sec, usec*1000)
	if guest.Before(before.Add(-clockBehind)) || guest.After(after.Add(clockAhead)) {
		t.Errorf("%s's clock read %s, want it between the host's %s and %s (it is %v off the first)",
			name, guest.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano), guest.Sub(before))
	}
}
