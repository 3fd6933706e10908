package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
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
// fall between the host's readings before and after the exec, give or
// take what the clock's sync cannot tell (half a round trip to the
// agent). Set without the sync, the clock lagged by the time its setting
// took to reach the guest: 57-67 ms behind the host's reading before
// after a template start, 101-107 ms after a cold boot; with it, every
// reading of 40 fell between the host's two.
const (
	clockBehind = 25 * time.Millisecond
	clockAhead  = 25 * time.Millisecond
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
// microsecond), asked for over a running exec's stdin so that the guest
// reads it soon after the host's reading before: through a new
// `docker exec` for each, the guest read its clock 100-200 ms after it,
// long enough to hide a clock that lags by as much.
func checkGuestClock(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "exec", "-i", name, "sh", "-c", "while read x; do busybox adjtimex; echo end; done")
	cmd.Env = dockerEnv()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	for i := range 5 {
		if i > 0 {
			// Spread over two seconds, the readings also catch a clock
			// that runs at the wrong rate: a guest on a busy host that
			// took its TSC's rate from the PIT ran its clock 13.6 times
			// fast (bench/README.md, the guest's clock).
			time.Sleep(400 * time.Millisecond)
		}
		before := time.Now()
		if _, err := io.WriteString(stdin, "\n"); err != nil {
			t.Fatal(err)
		}
		var out []string
		for lines.Scan() && lines.Text() != "end" {
			out = append(out, lines.Text())
		}
		after := time.Now()
		guest, err := adjtimexTime(out)
		if err != nil {
			t.Fatalf("%v (scan: %v)", err, lines.Err())
		}
		if guest.Before(before.Add(-clockBehind)) || guest.After(after.Add(clockAhead)) {
			t.Errorf("%s's clock read %s, want it between the host's %s and %s (it is %v off the first)",
				name, guest.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano), guest.Sub(before))
		}
	}
}

// adjtimexTime is the time in busybox adjtimex's output lines.
func adjtimexTime(out []string) (time.Time, error) {
	var sec, usec int64 = -1, -1
	for _, line := range out {
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
		return time.Time{}, fmt.Errorf("no time in adjtimex's output %q", out)
	}
	return time.Unix(sec, usec*1000), nil
}
