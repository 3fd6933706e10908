package e2e

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

// drawLoop prints, every 20 ms, a counter, the hostname in /etc/hostname
// (which a restored copy's refresh rewrites) and then 8 bytes of
// /dev/urandom, so that a line tells whether it was made before or after
// the copy's refresh.
const drawLoop = `i=0; while :; do i=$((i+1)); read h < /etc/hostname; echo $i $h $(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n'); sleep 0.02; done`

// draw is one line of drawLoop.
type draw struct{ count, host, value string }

// draws reads drawLoop's lines from a container's log.
func draws(t *testing.T, name string) []draw {
	t.Helper()
	var out []draw
	for _, line := range strings.Split(strings.TrimSpace(mustDocker(t, "logs", name)), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			out = append(out, draw{f[0], f[1], f[2]})
		}
	}
	return out
}

// waitDraws waits for n lines of drawLoop in a container's log.
func waitDraws(t *testing.T, name string, n int) []draw {
	t.Helper()
	var got []draw
	eventually(t, fmt.Sprintf("%s draws %d times", name, n), func() string {
		if got = draws(t, name); len(got) < n {
			return fmt.Sprintf("%d lines", len(got))
		}
		return ""
	})
	return got
}

// TestForksDrawTheirOwnNumbers: the processes of copies restored from one
// checkpoint run only once each copy has been refreshed, and from then on
// draw random numbers no other copy draws. They are frozen for the
// snapshot and thawed after the copy's refresh and reseed; before, a
// fork's first lines were made on the snapshot's RNG state and identity.
//
// Only one line of a fork may show the source's hostname: the one its loop
// was making when the freeze came, whose hostname (and maybe draw) it had
// read before the snapshot. Every line after it must show the fork's own
// hostname, and a draw that neither the other fork nor the source drew.
func TestForksDrawTheirOwnNumbers(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	src := containerName(t, "-src")
	mustDocker(t, "run", "-d", "--name", src, img, "sh", "-c", drawLoop)
	srcHost := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Config.Hostname}}", src))
	waitDraws(t, src, 10)
	mustDocker(t, "checkpoint", "create", "--leave-running", src, "cp")
	forks := huskFork(t, src, "cp", 2)

	drawn := map[string]map[string]bool{} // container → its draws
	lines := map[string][]draw{}
	for _, f := range forks {
		lines[f] = waitDraws(t, f, 6)
	}
	lines[src] = draws(t, src)
	for name, ds := range lines {
		drawn[name] = map[string]bool{}
		for _, d := range ds {
			drawn[name][d.value] = true
		}
	}
	for _, f := range forks {
		host := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Config.Hostname}}", f))
		t.Logf("%s (%s), its first lines: %v", f, host, lines[f][:3])
		for i, d := range lines[f] {
			switch {
			case d.host == srcHost && i == 0:
				continue // made as the freeze came
			case d.host != host:
				t.Errorf("%s line %d %v: made with hostname %s, not the fork's %s", f, i, d, d.host, host)
				continue
			}
			for other, values := range drawn {
				if other != f && values[d.value] {
					t.Errorf("%s line %d %v: %s drew %s too", f, i, d, other, d.value)
				}
			}
		}
	}
}

// TestCheckpointKeepsPausedContainerPaused: a checkpoint that leaves a
// paused container running leaves it paused, its processes stopped, until
// docker unpause.
func TestCheckpointKeepsPausedContainerPaused(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", drawLoop)
	waitDraws(t, name, 5)
	mustDocker(t, "pause", name)
	mustDocker(t, "checkpoint", "create", "--leave-running", name, "cp")
	if got := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Status}} {{.State.Paused}}", name)); got != "paused true" {
		t.Fatalf("after the checkpoint the container is %q, want paused", got)
	}
	before := draws(t, name)
	time.Sleep(time.Second)
	if after := draws(t, name); len(after) != len(before) {
		t.Fatalf("a paused container printed %d lines after its checkpoint", len(after)-len(before))
	}
	mustDocker(t, "unpause", name)
	eventually(t, name+" draws again after unpause", func() string {
		if after := draws(t, name); len(after) <= len(before) {
			return "no new line"
		}
		return ""
	})
}

// TestCheckpointDaemonKilledWhileFrozen: huskd is killed between a
// checkpoint's freeze of the container's processes and their thaw. The
// restarted daemon reaches the agent (the kill lands right after the
// freeze's answer, which can leave QEMU's agent channel stuck until a new
// dial), thaws the processes when it reattaches the VM, and the container
// goes on counting. A 512 MiB guest's snapshot takes over a second here,
// which leaves the kill, sent as soon as the daemon logs the freeze, time
// to land before the thaw.
func TestCheckpointDaemonKilledWhileFrozen(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--memory", "512m", "--name", name, img, "sh", "-c", counterScript))
	waitSteps(t, name, 2)

	create := exec.Command(suite.DockerCLI, "checkpoint", "create", "--leave-running", name, "cpf")
	create.Env = dockerEnv()
	if err := create.Start(); err != nil {
		t.Fatal(err)
	}
	froze := []string{`msg="froze the container's processes"`, "id=" + id[:12], "for=snapshot"}
	deadline := time.Now().Add(commandTimeout)
	for !daemonLogHas(t, froze...) {
		if time.Now().After(deadline) {
			t.Fatalf("huskd never logged %q", froze)
		}
		time.Sleep(5 * time.Millisecond)
	}
	crashDaemon(t)
	_ = create.Wait()
	if daemonLogHas(t, `msg="thawed the container's processes"`, "id="+id[:12], "for=snapshot") {
		t.Log("the thaw came before the kill; this run checks only that the container counts on")
	}
	if daemonLogHas(t, `msg="dialling the agent again"`) {
		t.Log("the reattach dialled the agent again")
	}

	if got := state(t, name); got != "running 0" {
		t.Fatalf("state after the crash = %q, want running", got)
	}
	n := len(steps(t, name))
	waitSteps(t, name, n+2)
}

// TestUnpausedProcessesSeeTheHostsTime: no process of an unpaused
// container reads a clock that stood still while it was paused. (A pause
// that stopped the VM stopped the guest's clock, and the processes ran on
// it until the clock's refresh arrived.) Only the line the loop was making
// when the freeze came may carry the time of the pause.
func TestUnpausedProcessesSeeTheHostsTime(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", `i=0; while :; do i=$((i+1)); echo $i $(date +%s); done`)
	eventually(t, name+" prints", func() string {
		if n := len(strings.Split(mustDocker(t, "logs", name), "\n")); n < 20 {
			return fmt.Sprintf("%d lines", n)
		}
		return ""
	})
	mustDocker(t, "pause", name)
	before := len(strings.Split(strings.TrimSpace(mustDocker(t, "logs", name)), "\n"))
	time.Sleep(3 * time.Second)
	unpaused := time.Now().Unix()
	mustDocker(t, "unpause", name)
	var after []string
	eventually(t, name+" prints after its unpause", func() string {
		lines := strings.Split(strings.TrimSpace(mustDocker(t, "logs", name)), "\n")
		if len(lines) < before+20 {
			return fmt.Sprintf("%d lines after the unpause", len(lines)-before)
		}
		after = lines[before:]
		return ""
	})
	stale := 0
	for i, line := range after {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("line %q is not a counter and a time", line)
		}
		secs, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if secs < unpaused-1 {
			stale++
			if i > 0 {
				t.Errorf("line %q, the %d. after the unpause, read the clock %d s behind the host's", line, i+1, unpaused-secs)
			}
		}
	}
	t.Logf("%d lines after the unpause, %d with the paused clock", len(after), stale)
}

// TestPauseKeepsTheGuestsTime: time goes on for a paused container, as
// under dockerd, whose pause freezes the container's processes and
// nothing else: the container's uptime after a pause of 3 s is 3 s on
// from where it was. (When a pause stopped the VM, the guest's monotonic
// clock stood still with it, and a sleep lost the paused time.) It runs
// against the reference dockerd too when the supervisor has one.
func TestPauseKeepsTheGuestsTime(t *testing.T) {
	requireSuite(t)
	onEachDaemon(t, func(t *testing.T, d daemonAt, img string) {
		name := nameAt(t, d, "")
		mustCLIAt(t, d, "run", "-d", "--name", name, img, "sh", "-c", `while :; do read u rest < /proc/uptime; echo $u; sleep 0.1; done`)
		uptimes := func() []float64 {
			var out []float64
			for _, f := range strings.Fields(mustCLIAt(t, d, "logs", name)) {
				v, err := strconv.ParseFloat(f, 64)
				if err != nil {
					t.Fatalf("log line %q is not an uptime", f)
				}
				out = append(out, v)
			}
			return out
		}
		eventually(t, name+" prints", func() string {
			if n := len(uptimes()); n < 5 {
				return fmt.Sprintf("%d lines", n)
			}
			return ""
		})
		mustCLIAt(t, d, "pause", name)
		time.Sleep(500 * time.Millisecond) // the last line before the freeze is stored
		before := uptimes()
		time.Sleep(3 * time.Second)
		mustCLIAt(t, d, "unpause", name)
		var after []float64
		eventually(t, name+" prints after its unpause", func() string {
			if after = uptimes(); len(after) < len(before)+3 {
				return fmt.Sprintf("%d lines after the unpause", len(after)-len(before))
			}
			return ""
		})
		// The first line after the unpause may be the one the loop
		// was making when the freeze came.
		last, resumed := before[len(before)-1], after[len(before)+2]
		t.Logf("%s: uptime %.2f before the pause, %.2f on the third line after it", d.kind, last, resumed)
		if resumed-last < 2.5 {
			t.Errorf("%s: the container's uptime went from %.2f to %.2f across a 3 s pause", d.kind, last, resumed)
		}
	})
}
