package e2e

import (
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

// counterScript counts in a shell variable, keeps the last count in a
// file, and prints "<count> <file content> <8 random bytes>" per step: the
// count shows memory survived, the file content (always count-1) that the
// disk matches it, and the random bytes that restored copies do not share
// their RNG.
const counterScript = `echo 0 > /state; i=0; while true; do i=$((i+1)); ` +
	`echo "$i $(cat /state) $(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"; ` +
	`echo $i > /state; sleep 0.3; done`

// step is one line of counterScript's output.
type step struct {
	count, file int
	random      string
}

// steps parses a container's log; it fails t on a line that is not a
// step, or whose file content does not match the count before it.
func steps(t *testing.T, name string) []step {
	t.Helper()
	var out []step
	for _, line := range strings.Split(mustDocker(t, "logs", name), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("%s: log line %q is not a step", name, line)
		}
		c, err1 := strconv.Atoi(f[0])
		v, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: log line %q is not a step", name, line)
		}
		if v != c-1 {
			t.Errorf("%s: step %d found %d in its file, want %d", name, c, v, c-1)
		}
		out = append(out, step{count: c, file: v, random: f[2]})
	}
	return out
}

// waitSteps waits until name's log holds more than n steps.
func waitSteps(t *testing.T, name string, n int) []step {
	t.Helper()
	var s []step
	eventually(t, fmt.Sprintf("%s logs more than %d steps", name, n), func() string {
		if s = steps(t, name); len(s) <= n {
			return fmt.Sprintf("%d steps", len(s))
		}
		return ""
	})
	return s
}

// continuesFrom checks that the steps after the first n continue the
// counter from around last (it resumed; it did not start over). One step
// may be lost at the session break (see README: output in flight).
func continuesFrom(t *testing.T, name string, s []step, n, last int) {
	t.Helper()
	if len(s) <= n {
		t.Fatalf("%s: no steps after the first %d", name, n)
	}
	first := s[n].count
	if first <= last-1 || first > last+2 {
		t.Errorf("%s: after the restore the counter went on at %d, want just after %d (steps %v)", name, first, last, s)
	}
	for i := n + 1; i < len(s); i++ {
		if s[i].count != s[i-1].count+1 {
			t.Errorf("%s: step %d follows %d", name, s[i].count, s[i-1].count)
		}
	}
}

func lastCount(s []step) int { return s[len(s)-1].count }

func state(t *testing.T, name string) string {
	t.Helper()
	return strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name))
}

// huskFork runs husk fork SRC --checkpoint CHECKPOINT -n N with args
// before -n, and returns the N containers it made, removed at the test's
// end.
func huskFork(t *testing.T, src, checkpoint string, n int, args ...string) []string {
	t.Helper()
	argv := append([]string{"fork", src, "--checkpoint", checkpoint}, args...)
	argv = append(argv, "-n", strconv.Itoa(n))
	cmd := exec.Command(huskCLI(t), argv...)
	cmd.Env = dockerEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("$ husk %s\n%s%s", strings.Join(argv, " "), out, stderr.String())
	if err != nil {
		t.Fatalf("husk fork: %v", err)
	}
	forks := strings.Fields(string(out))
	if len(forks) != n {
		t.Fatalf("husk fork printed %q, want %d names", out, n)
	}
	for _, f := range forks {
		t.Cleanup(func() { docker(t, "rm", "-f", f) })
	}
	return forks
}

// huskCLI returns the husk binary: from HUSK_BIN_DIR, else built here.
func huskCLI(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv(binDirEnv); dir != "" {
		if p := filepath.Join(dir, "husk"); fileExists(p) {
			return p
		}
	}
	out := filepath.Join(t.TempDir(), "husk")
	cmd := exec.Command("go", "build", "-o", out, "../cmd/husk")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build husk: %v\n%s", err, b)
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func requireHusk(t *testing.T) {
	t.Helper()
	requireSuite(t)
	if suite.Kind != harness.Huskd {
		// dockerd 20.10 here has no CRIU, and checkpoints there need it.
		t.Skip("checkpoints are tested against huskd only (the reference dockerd has no CRIU)")
	}
}

// TestCheckpointRestore: a counter checkpointed (the container stops),
// restored (it counts on from there with its file as it was, its log
// appended), checkpointed while left running, restored from the older of
// two checkpoints, and forked into two other containers that count on
// independently.
func TestCheckpointRestore(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", counterScript)
	before := waitSteps(t, name, 3)

	// `docker checkpoint` exists only for an experimental daemon.
	if r := docker(t, "checkpoint", "--help"); r.Code != 0 || !strings.Contains(r.Stdout, "Manage checkpoints") {
		t.Fatalf("docker checkpoint --help = %+v: the CLI does not offer checkpoints", r)
	}

	// Default: the container exits, as with dockerd.
	if r := docker(t, "checkpoint", "create", name, "cp1"); r.Code != 0 || r.Stdout != "cp1\n" {
		t.Fatalf("checkpoint create = %+v, want cp1 on stdout", r)
	}
	if got := state(t, name); got != "exited 137" {
		t.Errorf("state after checkpoint = %q, want exited 137", got)
	}
	// The checkpoint killed the VM; nothing is left to ask to shut down.
	id := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", name))
	if daemonLogHas(t, "guest shutdown", "id="+id[:12]) {
		t.Errorf("the daemon asked %s's guest to shut down after its checkpoint had killed the VM", id[:12])
	}
	if got := mustDocker(t, "checkpoint", "ls", name); got != "CHECKPOINT NAME\ncp1\n" {
		t.Errorf("checkpoint ls = %q", got)
	}
	atCheckpoint := steps(t, name)
	if len(atCheckpoint) < len(before) {
		t.Fatalf("log shrank over the checkpoint: %d then %d steps", len(before), len(atCheckpoint))
	}

	if r := docker(t, "start", "--checkpoint", "cp1", name); r.Code != 0 {
		t.Fatalf("start --checkpoint = %+v", r)
	}
	if got := state(t, name); got != "running 0" {
		t.Errorf("state after restore = %q, want running 0", got)
	}
	after := waitSteps(t, name, len(atCheckpoint)+2)
	continuesFrom(t, name, after, len(atCheckpoint), lastCount(atCheckpoint))

	// --leave-running: the container goes on; a later checkpoint; then
	// back to the earlier one.
	if r := docker(t, "checkpoint", "create", "--leave-running", name, "cp2"); r.Code != 0 {
		t.Fatalf("checkpoint create --leave-running = %+v", r)
	}
	atCP2 := steps(t, name)
	if got := state(t, name); got != "running 0" {
		t.Errorf("state after --leave-running = %q, want running 0", got)
	}
	waitSteps(t, name, len(atCP2)+2)
	mustDocker(t, "checkpoint", "create", name, "cp3")
	atCP3 := steps(t, name)
	if got := mustDocker(t, "checkpoint", "ls", name); got != "CHECKPOINT NAME\ncp1\ncp2\ncp3\n" {
		t.Errorf("checkpoint ls = %q", got)
	}
	mustDocker(t, "start", "--checkpoint", "cp2", name)
	back := waitSteps(t, name, len(atCP3)+2)
	continuesFrom(t, name, back, len(atCP3), lastCount(atCP2))

	// --checkpoint-dir: the checkpoint lives in a host directory, and the
	// container's own list does not show it.
	dir := t.TempDir()
	mustDocker(t, "checkpoint", "create", "--checkpoint-dir", dir, name, "outside")
	atOutside := steps(t, name)
	if !fileExists(filepath.Join(dir, "outside", "manifest.json")) {
		t.Errorf("no manifest in %s/outside", dir)
	}
	// The guest's RAM is a file of the checkpoint's, which restores map,
	// not a part of the VMM's stream, which they would load page by page.
	if _, err := os.Stat(filepath.Join(dir, "outside", "vm", "memory")); err != nil {
		t.Errorf("checkpoint's guest memory file: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "outside", "vm", "vmstate")); err != nil || st.Size() > 8<<20 {
		t.Errorf("checkpoint's VMM stream: %v, want one of device state only, not the guest's RAM", err)
	}
	if got := mustDocker(t, "checkpoint", "ls", "--checkpoint-dir", dir, name); got != "CHECKPOINT NAME\noutside\n" {
		t.Errorf("checkpoint ls --checkpoint-dir = %q", got)
	}
	if got := mustDocker(t, "checkpoint", "ls", name); strings.Contains(got, "outside") {
		t.Errorf("container's own checkpoint list shows one of --checkpoint-dir: %q", got)
	}

	// Forks: two new containers restored at once from that checkpoint.
	forks := huskFork(t, name, "outside", 2, "--checkpoint-dir", dir)
	fs := make([][]step, len(forks))
	for i, f := range forks {
		if got := state(t, f); got != "running 0" {
			t.Errorf("fork %s: state %q, want running 0", f, got)
		}
		fs[i] = waitSteps(t, f, 3)
		continuesFrom(t, f, fs[i], 0, lastCount(atOutside))
	}
	// Each fork draws its own random numbers after the restore (its RNG
	// was reseeded), and stopping one leaves the other counting.
	if fs[0][1].count == fs[1][1].count && fs[0][1].random == fs[1][1].random {
		t.Errorf("forks drew the same random bytes at step %d: %s", fs[0][1].count, fs[0][1].random)
	}
	mustDocker(t, "kill", forks[0])
	n := len(steps(t, forks[1]))
	waitSteps(t, forks[1], n+1)
	if got := state(t, name); got != "exited 137" {
		t.Errorf("the forked container: %q, want exited 137 (untouched by its forks)", got)
	}

	// rm: gone from the list, and its name free again.
	mustDocker(t, "checkpoint", "rm", name, "cp1")
	if got := mustDocker(t, "checkpoint", "ls", name); got != "CHECKPOINT NAME\ncp2\ncp3\n" {
		t.Errorf("checkpoint ls after rm = %q", got)
	}
}

// TestCheckpointErrors: dockerd's answers (moby v28.2.2's wording) to
// checkpointing a stopped container, an unknown checkpoint on start and
// rm, a duplicate or invalid name; a damaged checkpoint fails the restore
// and leaves the container as it was.
func TestCheckpointErrors(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	id := strings.TrimSpace(mustDocker(t, "create", "--name", name, img, "sh", "-c", counterScript))

	cases := []struct {
		args   []string
		stderr string
	}{
		{[]string{"checkpoint", "create", name, "cp1"}, "Error response from daemon: container " + id + " is not running\n"},
		{[]string{"start", "--checkpoint", "nope", name}, "Error response from daemon: checkpoint nope does not exist for container /" + name + "\n"},
		{[]string{"checkpoint", "rm", name, "nope"}, "Error response from daemon: checkpoint nope does not exist for container " + name + "\n"},
	}
	for _, c := range cases {
		if r := docker(t, c.args...); r.Code != 1 || r.Stderr != c.stderr {
			t.Errorf("docker %s = %+v, want exit 1 and %q", strings.Join(c.args, " "), r, c.stderr)
		}
	}
	if got := state(t, name); got != "created 0" {
		t.Errorf("state after failed starts = %q, want created 0", got)
	}

	mustDocker(t, "start", name)
	waitSteps(t, name, 2)
	dir := t.TempDir()
	mustDocker(t, "checkpoint", "create", "--leave-running", "--checkpoint-dir", dir, name, "cp1")
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"checkpoint", "create", "--checkpoint-dir", dir, name, "cp1"},
			"Error response from daemon: cannot checkpoint container " + name + ": checkpoint with name cp1 already exists for container " + name + "\n"},
		{[]string{"checkpoint", "create", name, "x"},
			"Error response from daemon: Invalid checkpoint ID (x), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed\n"},
	} {
		if r := docker(t, c.args...); r.Code != 1 || r.Stderr != c.stderr {
			t.Errorf("docker %s = %+v, want exit 1 and %q", strings.Join(c.args, " "), r, c.stderr)
		}
	}
	mustDocker(t, "stop", "-t", "0", name)
	stopped := state(t, name)

	// One flipped byte in the saved memory.
	vmstate := filepath.Join(dir, "cp1", "vm", "vmstate")
	f, err := os.OpenFile(vmstate, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 4096); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := docker(t, "start", "--checkpoint", "cp1", "--checkpoint-dir", dir, name)
	if r.Code != 1 || !strings.Contains(r.Stderr, "cannot restore checkpoint cp1") || !strings.Contains(r.Stderr, "vm/vmstate does not match its digest") {
		t.Errorf("start from a damaged checkpoint = %+v, want a refusal naming vm/vmstate", r)
	}
	if got := state(t, name); got != stopped {
		t.Errorf("state after the refused restore = %q, want %q as before", got, stopped)
	}
	// The files are checked while the VMM loads them: the refusal ends
	// that VMM and takes its TAP away.
	if pids := vmmProcesses(t, id); len(pids) != 0 {
		t.Errorf("VMM processes left after the refused restore: %v", pids)
	}
	if taps := hostLinks(t, "hk"+id[:12]); len(taps) != 0 {
		t.Errorf("TAPs left after the refused restore: %v", taps)
	}
	// The container itself is untouched: a plain start boots it afresh.
	n := len(steps(t, name))
	mustDocker(t, "start", name)
	s := waitSteps(t, name, n+1)
	if s[n].count != 1 {
		t.Errorf("plain start after a refused restore counted from %d, want 1", s[n].count)
	}
}

// TestCheckpointDaemonKilled: huskd is killed with SIGKILL while a
// checkpoint is being made. After the restart no partial checkpoint is
// listed or left on disk, and the container goes on counting.
func TestCheckpointDaemonKilled(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", counterScript))
	waitSteps(t, name, 2)

	create := exec.Command(suite.DockerCLI, "checkpoint", "create", name, "cpk")
	create.Env = dockerEnv()
	if err := create.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill the daemon once it is working on the checkpoint. Whether the
	// kill lands before, during or after the snapshot, what follows must
	// hold.
	eventually(t, "the daemon received the checkpoint request", func() string {
		b, _ := os.ReadFile(suite.DaemonLog)
		if !strings.Contains(string(b), "/containers/"+name+"/checkpoints") {
			return "not yet"
		}
		return ""
	})
	crashDaemon(t)
	_ = create.Wait()

	ls := mustDocker(t, "checkpoint", "ls", name)
	if ls != "CHECKPOINT NAME\n" && ls != "CHECKPOINT NAME\ncpk\n" {
		t.Errorf("checkpoint ls after the crash = %q, want nothing or the complete cpk", ls)
	}
	dir := filepath.Join(suite.DaemonRoot, "containers", id, "checkpoints")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "cpk" {
			t.Errorf("left in %s after the restart: %s", dir, e.Name())
		}
	}
	// The checkpoint may have stopped the container just before the
	// kill; otherwise it must still be counting.
	if got := state(t, name); got == "running 0" {
		n := len(steps(t, name))
		waitSteps(t, name, n+1)
	} else if got != "exited 137" || !strings.Contains(ls, "cpk") {
		t.Errorf("state after the crash = %q with checkpoints %q, want running, or exited 137 with cpk made", got, ls)
	}
}

// vmmProcesses lists the pids of the processes that run in container id's
// directory, as its VMM does.
func vmmProcesses(t *testing.T, id string) []int {
	t.Helper()
	return processesUnder(t, filepath.Join(suite.DaemonRoot, "containers", id))
}

// TestCheckpointOutlivesInitramfsRebuild: the daemon's guest initramfs
// is built again from the same agent, as after a daemon of another
// version pruned it, or a lost cache. Checkpoints record the archive's
// digest, and one made before must still restore: an archive dated at
// its build was refused ("made with another guest initramfs").
func TestCheckpointOutlivesInitramfsRebuild(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", counterScript)
	waitSteps(t, name, 2)
	mustDocker(t, "checkpoint", "create", name, "cpr")
	atCheckpoint := steps(t, name)

	start := killDaemon(t)
	cache := filepath.Join(suite.DaemonRoot, "kernel")
	archives, err := filepath.Glob(filepath.Join(cache, "initramfs-*"))
	if err != nil || len(archives) == 0 {
		t.Fatalf("no initramfs in %s (%v)", cache, err)
	}
	for _, a := range archives {
		if err := os.Remove(a); err != nil {
			t.Fatal(err)
		}
	}
	start()
	if rebuilt, _ := filepath.Glob(filepath.Join(cache, "initramfs-*")); len(rebuilt) == 0 {
		t.Fatalf("the restarted daemon built no initramfs in %s", cache)
	}

	if r := docker(t, "start", "--checkpoint", "cpr", name); r.Code != 0 {
		t.Fatalf("start --checkpoint after the rebuild = %+v", r)
	}
	after := waitSteps(t, name, len(atCheckpoint)+2)
	continuesFrom(t, name, after, len(atCheckpoint), lastCount(atCheckpoint))
}

// TestCheckpointLimits: a container checkpointed with --memory 128m and
// updated to 64m while stopped is restored into the VM its checkpoint was
// taken in, held to its new limit: 96 MiB no longer fit.
func TestCheckpointLimits(t *testing.T) {
	requireHusk(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	fill := []string{"exec", name, "dd", "if=/dev/zero", "of=/dev/null", "bs=96M", "count=1"}
	mustDocker(t, "run", "-d", "--name", name, "--memory", "128m", img, "sleep", "1000")
	if r := docker(t, fill...); r.Code != 0 {
		t.Fatalf("96 MiB under --memory 128m = %+v, want room for it", r)
	}
	mustDocker(t, "checkpoint", "create", name, "cp1")
	mustDocker(t, "update", "--memory", "64m", name)
	mustDocker(t, "start", "--checkpoint", "cp1", name)
	if got := state(t, name); got != "running 0" {
		t.Fatalf("state after the restore = %q, want running 0", got)
	}
	if r := docker(t, fill...); r.Code != 137 {
		t.Errorf("96 MiB after the restore under --memory 64m = %+v, want an OOM kill (exit 137)", r)
	}
	mustDocker(t, "rm", "-f", name)
}
