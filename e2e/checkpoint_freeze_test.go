package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

// drawLoop prints a counter and 8 bytes of /dev/urandom every 20 ms.
const drawLoop = `i=0; while :; do i=$((i+1)); echo $i $(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n'); sleep 0.02; done`

// draws reads drawLoop's lines from a container's log: the bytes each
// counter drew.
func draws(t *testing.T, name string) (map[string]string, []string) {
	t.Helper()
	byCount := map[string]string{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(mustDocker(t, "logs", name)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		byCount[f[0]] = f[1]
		order = append(order, f[0])
	}
	return byCount, order
}

// TestForksDrawTheirOwnNumbers: the processes of copies restored from one
// checkpoint draw different random numbers from their first draw after the
// restore. They were frozen for the snapshot and thawed only once each
// copy's RNG was reseeded; without the freeze they ran on the snapshot's
// RNG state, every copy's first draws the same.
func TestForksDrawTheirOwnNumbers(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	src := containerName(t, "-src")
	mustDocker(t, "run", "-d", "--name", src, img, "sh", "-c", drawLoop)
	eventually(t, src+" draws", func() string {
		if _, order := draws(t, src); len(order) < 10 {
			return "fewer than 10 lines yet"
		}
		return ""
	})
	mustDocker(t, "checkpoint", "create", "--leave-running", src, "cp")
	cmd := exec.Command(huskCLI(t), "fork", src, "--checkpoint", "cp", "-n", "2")
	cmd.Env = dockerEnv()
	out, err := cmd.CombinedOutput()
	t.Logf("$ husk fork %s --checkpoint cp -n 2\n%s", src, out)
	if err != nil {
		t.Fatalf("husk fork: %v", err)
	}
	forks := strings.Fields(string(out))
	if len(forks) != 2 {
		t.Fatalf("husk fork printed %q, want two names", out)
	}
	for _, f := range forks {
		t.Cleanup(func() { docker(t, "rm", "-f", f) })
	}
	for _, f := range forks {
		eventually(t, f+" draws", func() string {
			if _, order := draws(t, f); len(order) < 5 {
				return "fewer than 5 lines yet"
			}
			return ""
		})
	}
	// The source ran on past the snapshot from the same RNG state, so
	// its lines with the forks' counters are one more copy to tell apart.
	a, aOrder := draws(t, forks[0])
	b, bOrder := draws(t, forks[1])
	s, _ := draws(t, src)
	t.Logf("first draws after the restore: %s %v, %s %v", forks[0], aOrder[:3], forks[1], bOrder[:3])
	compared := 0
	for _, n := range aOrder[:5] {
		for other, drawn := range map[string]map[string]string{forks[1]: b, src: s} {
			if v, ok := drawn[n]; ok {
				compared++
				if v == a[n] {
					t.Errorf("draw %s: %s and %s both drew %s", n, forks[0], other, v)
				}
			}
		}
	}
	if compared == 0 {
		t.Fatalf("no draw of %s's first five (%v) is in %s's or the source's log", forks[0], aOrder[:5], forks[1])
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
	eventually(t, name+" draws", func() string {
		if _, order := draws(t, name); len(order) < 5 {
			return "fewer than 5 lines yet"
		}
		return ""
	})
	mustDocker(t, "pause", name)
	mustDocker(t, "checkpoint", "create", "--leave-running", name, "cp")
	if got := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Status}} {{.State.Paused}}", name)); got != "paused true" {
		t.Fatalf("after the checkpoint the container is %q, want paused", got)
	}
	_, before := draws(t, name)
	time.Sleep(time.Second)
	if _, after := draws(t, name); len(after) != len(before) {
		t.Fatalf("a paused container printed %d lines after its checkpoint", len(after)-len(before))
	}
	mustDocker(t, "unpause", name)
	eventually(t, name+" draws again after unpause", func() string {
		if _, after := draws(t, name); len(after) <= len(before) {
			return "no new line"
		}
		return ""
	})
}

// TestCheckpointDaemonKilledWhileFrozen: huskd is killed between a
// checkpoint's freeze of the container's processes and their thaw. The
// restarted daemon thaws them when it reattaches the VM, and the
// container goes on counting. A 512 MiB guest's snapshot takes over a
// second here, which leaves the kill, sent as soon as the daemon logs the
// freeze, time to land before the thaw.
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
	froze := `msg="froze the container for a snapshot" id=` + id[:12]
	deadline := time.Now().Add(commandTimeout)
	for !daemonLogHas(t, froze) {
		if time.Now().After(deadline) {
			t.Fatalf("huskd never logged %q", froze)
		}
		time.Sleep(5 * time.Millisecond)
	}
	crashDaemon(t)
	_ = create.Wait()
	if daemonLogHas(t, `msg="thawed the container after a snapshot" id=`+id[:12]) {
		t.Log("the thaw came before the kill; this run checks only that the container counts on")
	}

	if got := state(t, name); got != "running 0" {
		t.Fatalf("state after the crash = %q, want running", got)
	}
	n := len(steps(t, name))
	waitSteps(t, name, n+2)
}
