package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
	"github.com/husk-vm/husk/runtime/containers"
)

// inspected is the part of `docker inspect`'s JSON the tests check.
type inspected struct {
	ID    string `json:"Id"`
	Name  string
	Path  string
	Args  []string
	Image string
	State struct {
		Status   string
		Running  bool
		ExitCode int
		Pid      int
	}
	Config struct {
		Hostname string
		Image    string
		Cmd      []string
		Env      []string
	}
}

func inspectContainer(t *testing.T, name string) inspected {
	t.Helper()
	var got []inspected
	if err := json.Unmarshal([]byte(mustDocker(t, "container", "inspect", name)), &got); err != nil || len(got) != 1 {
		t.Fatalf("container inspect %s: %d results, %v", name, len(got), err)
	}
	return got[0]
}

var (
	fullID      = regexp.MustCompile(`^[0-9a-f]{64}$`)
	timestamped = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z started\n\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z foo\n$`)
)

func TestDetachedLifecycle(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	imageID := strings.TrimSpace(mustDocker(t, "image", "inspect", "-f", "{{.Id}}", img))
	name := containerName(t, "")
	// sh stays PID 1 with sleep as its child: PID 1 without a handler
	// ignores SIGTERM, so only the SIGKILL after the stop timeout ends it.
	script := "echo started; hostname; echo to-stderr >&2; sleep 1000"

	r := docker(t, "run", "-d", "--name", name, "--hostname", "foo", img, "sh", "-c", script)
	id := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || r.Stderr != "" || !fullID.MatchString(id) {
		t.Fatalf("run -d = %+v, want the full container ID on stdout", r)
	}

	eventually(t, "logs show the container's output", func() string {
		if r := docker(t, "logs", name); r != (result{Stdout: "started\nfoo\n", Stderr: "to-stderr\n"}) {
			return "logs = " + r.Stdout + " / " + r.Stderr
		}
		return ""
	})

	ps := mustDocker(t, "ps", "--filter", "name=^"+name+"$", "--format", "{{.ID}}|{{.Names}}|{{.Image}}|{{.Status}}")
	if f := strings.Split(strings.TrimSpace(ps), "|"); len(f) != 4 || f[0] != id[:12] || f[1] != name || f[2] != img || !strings.HasPrefix(f[3], "Up ") {
		t.Errorf("docker ps line = %q, want %s|%s|%s|Up ...", ps, id[:12], name, img)
	}
	if got := mustDocker(t, "ps", "-q", "--no-trunc", "--filter", "id="+id[:12]); got != id+"\n" {
		t.Errorf("ps -q --no-trunc filtered by ID prefix = %q, want %q", got, id+"\n")
	}

	c := inspectContainer(t, name)
	if c.ID != id || c.Name != "/"+name || c.Image != imageID || c.Path != "sh" || !slices.Equal(c.Args, []string{"-c", script}) {
		t.Errorf("inspect: Id %q Name %q Image %q Path %q Args %q", c.ID, c.Name, c.Image, c.Path, c.Args)
	}
	if c.State.Status != "running" || !c.State.Running || c.State.Pid <= 0 || c.State.ExitCode != 0 {
		t.Errorf("inspect State = %+v, want running with a Pid", c.State)
	}
	if c.Config.Hostname != "foo" || c.Config.Image != img || !slices.Equal(c.Config.Cmd, []string{"sh", "-c", script}) ||
		!slices.Contains(c.Config.Env, testimages.PathEnv) {
		t.Errorf("inspect Config = %+v", c.Config)
	}
	// The CLI's own template path over the same data, by ID prefix.
	if got := mustDocker(t, "inspect", "-f", "{{.State.Running}} {{.Config.Hostname}} {{.Name}}", id[:12]); got != "true foo /"+name+"\n" {
		t.Errorf("inspect -f = %q", got)
	}

	if r := docker(t, "stop", "-t", "1", name); r != (result{Stdout: name + "\n"}) {
		t.Errorf("stop -t 1 = %+v, want the name echoed", r)
	}
	if r := docker(t, "wait", name); r != (result{Stdout: "137\n"}) {
		t.Errorf("wait after stop = %+v, want 137", r)
	}
	c = inspectContainer(t, id)
	if c.State.Status != "exited" || c.State.Running || c.State.ExitCode != 137 || c.State.Pid != 0 {
		t.Errorf("inspect State after stop = %+v, want exited with 137", c.State)
	}
	if got := mustDocker(t, "ps", "-a", "--filter", "name=^"+name+"$", "--format", "{{.Status}}"); !strings.HasPrefix(got, "Exited (137) ") {
		t.Errorf("ps -a status after stop = %q, want Exited (137) ...", got)
	}
	if got := mustDocker(t, "ps", "-q", "--filter", "name=^"+name+"$"); got != "" {
		t.Errorf("ps without -a lists the stopped container: %q", got)
	}
	// Logs are kept on the host and outlive the container's process.
	if r := docker(t, "logs", name); r != (result{Stdout: "started\nfoo\n", Stderr: "to-stderr\n"}) {
		t.Errorf("logs after stop = %+v", r)
	}
	if r := docker(t, "logs", "--follow", name); r != (result{Stdout: "started\nfoo\n", Stderr: "to-stderr\n"}) {
		t.Errorf("logs --follow of a stopped container = %+v, want everything, then exit", r)
	}
	if r := docker(t, "logs", "--tail", "2", name); r != (result{Stdout: "foo\n", Stderr: "to-stderr\n"}) {
		t.Errorf("logs --tail 2 = %+v, want the last two lines across both streams", r)
	}
	if r := docker(t, "logs", "--timestamps", name); r.Code != 0 || !timestamped.MatchString(r.Stdout) {
		t.Errorf("logs --timestamps = %+v, want RFC 3339 timestamps before started and foo", r)
	}

	if r := docker(t, "rm", name); r != (result{Stdout: name + "\n"}) {
		t.Errorf("rm = %+v, want the name echoed", r)
	}
	if got := mustDocker(t, "ps", "-aq", "--filter", "name=^"+name+"$"); got != "" {
		t.Errorf("ps -a still lists the removed container: %q", got)
	}
}

func TestKillAndForceRemove(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	killed, removed := containerName(t, "-killed"), containerName(t, "-removed")
	mustDocker(t, "run", "-d", "--name", killed, img, "sleep", "1000")
	removedID := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", removed, img, "sleep", "1000"))
	if r := docker(t, "kill", killed); r != (result{Stdout: killed + "\n"}) {
		t.Errorf("kill = %+v, want the name echoed", r)
	}
	if r := docker(t, "wait", killed); r != (result{Stdout: "137\n"}) {
		t.Errorf("wait after kill = %+v, want 137", r)
	}
	if r, want := docker(t, "rm", removed), (result{Code: 1, Stderr: "Error response from daemon: You cannot remove a running container " +
		removedID + ". Stop the container before attempting removal or force remove\n"}); r != want {
		t.Errorf("rm of a running container = %+v, want %+v", r, want)
	}
	if r := docker(t, "rm", "-f", removed, killed); r != (result{Stdout: removed + "\n" + killed + "\n"}) {
		t.Errorf("rm -f = %+v, want both names echoed", r)
	}
	if got := mustDocker(t, "ps", "-aq", "--filter", "name="+namePrefix(t)); got != "" {
		t.Errorf("ps -a still lists removed containers: %q", got)
	}
}

func TestMissingContainer(t *testing.T) {
	requireSuite(t)
	// Wording and streams exactly as dockerd 20.10 and CLI 28.2.2 show
	// them; the inspect commands print an empty JSON list on stdout.
	const noSuch = "Error response from daemon: No such container: nope\n"
	tests := []struct {
		args []string
		want result
	}{
		{[]string{"rm", "nope"}, result{Stderr: noSuch, Code: 1}},
		{[]string{"inspect", "nope"}, result{Stdout: "[]\n", Stderr: "Error: No such object: nope\n", Code: 1}},
		{[]string{"container", "inspect", "nope"}, result{Stdout: "[]\n", Stderr: noSuch, Code: 1}},
		{[]string{"stop", "nope"}, result{Stderr: noSuch, Code: 1}},
		{[]string{"start", "nope"}, result{Stderr: noSuch + "Error: failed to start containers: nope\n", Code: 1}},
		{[]string{"logs", "nope"}, result{Stderr: noSuch, Code: 1}},
		{[]string{"wait", "nope"}, result{Stderr: noSuch, Code: 1}},
		{[]string{"kill", "nope"}, result{Stderr: "Error response from daemon: Cannot kill container: nope: No such container: nope\n", Code: 1}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if r := docker(t, tt.args...); r != tt.want {
				t.Errorf("got %+v, want %+v", r, tt.want)
			}
		})
	}
}

func TestMissingImage(t *testing.T) {
	requireSuite(t)
	img := ref("husk/nope")
	r := docker(t, "run", "--rm", img, "true")
	// dockerd words the registry's MANIFEST_UNKNOWN for a repository it has
	// never seen like this; the CLI frames it and exits 125.
	want := result{
		Stderr: "Unable to find image '" + img + "' locally\n" +
			"docker: Error response from daemon: manifest for " + img + " not found: manifest unknown: manifest unknown\n\n" +
			"Run 'docker run --help' for more information\n",
		Code: 125,
	}
	if r != want {
		t.Errorf("run of a missing image = %+v, want %+v", r, want)
	}
}

func TestRestartKeepsState(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	created, exited := containerName(t, "-created"), containerName(t, "-exited")
	mustDocker(t, "create", "--name", created, img, "sh", "-c", "echo first; exit 4")
	if r := docker(t, "run", "--name", exited, img, "sh", "-c", "echo persisted; exit 5"); r != (result{Stdout: "persisted\n", Code: 5}) {
		t.Fatalf("run = %+v, want persisted and exit 5", r)
	}
	psArgs := []string{"ps", "-a", "--no-trunc", "--filter", "name=" + namePrefix(t),
		"--format", "{{.ID}} {{.Names}} {{.Image}} {{.Command}} {{.State}}"}
	imagesArgs := []string{"images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}"}
	// The test images share one creation time, so `docker images` may list
	// them in any order; compare sorted lines.
	psBefore, imagesBefore := mustDocker(t, psArgs...), sortedLines(mustDocker(t, imagesArgs...))
	if strings.Count(psBefore, "\n") != 2 {
		t.Fatalf("ps -a before restart = %q, want the two containers", psBefore)
	}

	restartDaemon(t)

	if got := mustDocker(t, psArgs...); got != psBefore {
		t.Errorf("ps -a after restart:\n%s\nbefore:\n%s", got, psBefore)
	}
	if got := sortedLines(mustDocker(t, imagesArgs...)); got != imagesBefore {
		t.Errorf("images after restart:\n%s\nbefore:\n%s", got, imagesBefore)
	}
	if got := mustDocker(t, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", exited); got != "exited 5\n" {
		t.Errorf("inspect after restart = %q, want \"exited 5\"", got)
	}
	if r := docker(t, "logs", exited); r != (result{Stdout: "persisted\n"}) {
		t.Errorf("logs after restart = %+v", r)
	}
	// A container created before the restart still starts; start -a
	// attaches before starting, so no output is lost, and passes the exit
	// code through.
	if r := docker(t, "start", "-a", created); r != (result{Stdout: "first\n", Code: 4}) {
		t.Errorf("start -a after restart = %+v, want first and exit 4", r)
	}
	mustDocker(t, "rm", created, exited)
}

func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// TestDaemonCrashKeepsContainerRunning is husk's deliberate difference from
// dockerd without live-restore: a VMM does not die with the daemon, so after
// `kill -9` of huskd the next huskd reattaches to the running VM through a
// new agent session. The process keeps its state, output produced while no
// daemon was there reaches the log, and stop and rm still work.
func TestDaemonCrashKeepsContainerRunning(t *testing.T) {
	s := requireSuite(t)
	if s.Kind != "huskd" {
		t.Skip("dockerd without live-restore stops its containers after a crash")
	}
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	// Output comes fast, so that the crash likely lands while a line is
	// between the guest and the log file.
	mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.01; done")
	eventually(t, "first output", func() string {
		if strings.Contains(docker(t, "logs", name).Stdout, "line 3\n") {
			return ""
		}
		return "no line 3 yet"
	})

	crashDaemon(t)

	if got := mustDocker(t, "inspect", "-f", "{{.State.Status}}", name); got != "running\n" {
		t.Fatalf("state after the daemon crash = %q, want running", got)
	}
	before := strings.Count(docker(t, "logs", name).Stdout, "\n")
	eventually(t, "output after reattach", func() string {
		if n := strings.Count(docker(t, "logs", name).Stdout, "\n"); n <= before+3 {
			return fmt.Sprintf("%d lines, want more than %d", n, before+3)
		}
		return ""
	})
	// The counter lives in the shell's memory: it went on, with no line
	// missing or repeated across the crash.
	lines := strings.Split(strings.TrimSuffix(docker(t, "logs", name).Stdout, "\n"), "\n")
	for i, l := range lines {
		if want := fmt.Sprintf("line %d", i); l != want {
			t.Fatalf("log line %d = %q, want %q (lines: %q)", i, l, want, lines)
		}
	}
	if r := docker(t, "stop", "-t", "1", name); r.Code != 0 {
		t.Fatalf("stop after reattach = %+v", r)
	}
	if got := mustDocker(t, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name); got != "exited 137\n" {
		t.Errorf("after stop: %q, want \"exited 137\"", got)
	}
	mustDocker(t, "rm", name)
}

// TestDaemonCrashMidStart: a daemon killed while it boots a container's
// VM leaves that VM's QEMU running, with the container recorded as
// created. The next daemon ends it, so that nothing of the start is left
// running and the container starts again (with the QEMU left there, the
// start failed: "QEMU ... already runs in ...").
func TestDaemonCrashMidStart(t *testing.T) {
	s := requireSuite(t)
	if s.Kind != "huskd" {
		t.Skip("the VMM is husk's")
	}
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	id := strings.TrimSpace(mustDocker(t, "create", "--name", name, "--label", containers.BootLabel+"=cold", img, "sleep", "600"))
	short := id[:12]
	hangUpAfter(t, suite.DockerHost, "POST", "/containers/"+name+"/start")
	// A cold boot takes seconds under TCG: the crash lands between QEMU's
	// start and the container's. Under QEMU the test makes sure of it: once
	// the guest's second CPU runs its kernel (huskd checked that QEMU runs
	// long before), its vCPUs are stopped, so the boot cannot end first.
	eventually(t, "the container's QEMU started", func() string {
		if !daemonLogHas(t, `msg="qemu started"`, "vm="+short) {
			return "no \"qemu started\" line for " + short
		}
		return ""
	})
	if suite.VMM == "qemu" {
		secondCPUInKernel(t, containerVM(id))
		if err := vmQMP(context.Background(), suite.DaemonRoot, id, "stop", nil, nil); err != nil {
			t.Fatalf("stop %s's vCPUs: %v", short, err)
		}
	}
	crashDaemon(t)
	if got := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Status}}", name)); got != "created" {
		t.Fatalf("after a crash during its start %s is %s, want created (did the crash come after the start?)", name, got)
	}
	left, err := harness.ProcessesMentioning("process=husk-" + short)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range left {
		t.Errorf("the QEMU of the start the crash interrupted still runs: pid %d: %s", p.PID, p.Cmdline)
	}
	if !daemonLogHas(t, "killing the VM of a start the previous daemon did not finish", "id="+short) {
		t.Errorf("no line saying the daemon killed %s's VM", short)
	}
	mustDocker(t, "start", name)
	mustDocker(t, "exec", name, "true")
	mustDocker(t, "rm", "-f", name)
}

// TestAutoRemoveAfterDaemonCrash: a --rm container that does not run
// after a daemon restart is removed, as dockerd removes it at its start:
// here one whose VM died while no daemon was there to see it exit, and
// one created but never started. One whose VM survived runs on, and is
// removed once it exits.
func TestAutoRemoveAfterDaemonCrash(t *testing.T) {
	s := requireSuite(t)
	if s.Kind != "huskd" {
		t.Skip("dockerd without live-restore stops every container when it crashes")
	}
	img := pulled(t, testimages.Busybox)
	lost, created, survivor := containerName(t, "lost"), containerName(t, "created"), containerName(t, "survivor")
	lostID := strings.TrimSpace(mustDocker(t, "run", "-d", "--rm", "--name", lost, img, "sleep", "600"))
	createdID := strings.TrimSpace(mustDocker(t, "create", "--rm", "--name", created, img, "true"))
	mustDocker(t, "run", "-d", "--rm", "--name", survivor, img, "sleep", "600")
	pid := vmmPID(t, lost)

	start := killDaemon(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s's VMM: %v", lost, err)
	}
	eventually(t, "the VMM gone", func() string {
		left, err := harness.ProcessesMentioning("process=husk-" + lostID[:12])
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			return fmt.Sprintf("pid %d still runs", left[0].PID)
		}
		return ""
	})
	start()

	for name, id := range map[string]string{lost: lostID, created: createdID} {
		if r := docker(t, "inspect", name); r.Code == 0 || !strings.Contains(r.Stderr, "No such") {
			t.Errorf("inspect %s after the restart: %+v, want it removed", name, r)
		}
		if !daemonLogHas(t, "removing a --rm container that is not running after the daemon restart", "id="+id[:12]) {
			t.Errorf("no line saying the daemon removed %s", name)
		}
	}
	if got := mustDocker(t, "inspect", "-f", "{{.State.Status}}", survivor); got != "running\n" {
		t.Fatalf("%s after the restart is %q, want running", survivor, got)
	}
	mustDocker(t, "kill", survivor)
	eventually(t, "the survivor removed once it exited", func() string {
		if r := docker(t, "inspect", survivor); r.Code == 0 || !strings.Contains(r.Stderr, "No such") {
			return fmt.Sprintf("inspect: %+v", r)
		}
		return ""
	})
}

// TestDeadVMMIsReported: when a container's VMM dies under it, the
// container ends as exited with the error said, it can be removed, and
// nothing of it is left running (the suite checks for leftover VMMs).
func TestDeadVMMIsReported(t *testing.T) {
	s := requireSuite(t)
	if s.Kind != "huskd" {
		t.Skip("the VMM is husk's")
	}
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, img, "sleep", "1000")
	pid := vmmPID(t, name)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the VMM: %v", err)
	}
	if got := mustDocker(t, "wait", name); got != "255\n" {
		t.Errorf("wait after the VMM died = %q, want 255", got)
	}
	got := mustDocker(t, "inspect", "-f", "{{.State.Status}} {{.State.Pid}} {{.State.Error}}", name)
	if want := fmt.Sprintf("exited 0 the container's VM exited unexpectedly (VMM pid %d)\n", pid); got != want {
		t.Errorf("state after the VMM died = %q, want %q", got, want)
	}
	mustDocker(t, "rm", name)
}

// TestDaemonCrashMidRemove: a daemon killed while it force-removes a
// container leaves the container dead, as dockerd does (it cannot know
// which volumes the removal was to take): its VM is killed, its exit is
// the removal's SIGKILL, it cannot be started, and docker rm removes it.
// A second removal meanwhile is refused, as dockerd refuses it. The crash
// lands during the removal because the guest is wedged first
// (its vCPUs stopped through QEMU's monitor), so the kill waits seconds
// for the agent before it kills the VM.
func TestDaemonCrashMidRemove(t *testing.T) {
	requireQEMUDaemon(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img, "sleep", "600"))
	short := id[:12]
	if err := vmQMP(context.Background(), suite.DaemonRoot, id, "stop", nil, nil); err != nil {
		t.Fatalf("stop %s's vCPUs: %v", short, err)
	}
	hangUpAfter(t, suite.DockerHost, "DELETE", "/containers/"+name+"?force=1")
	eventually(t, "the removal begun", func() string {
		if !daemonLogHas(t, `msg="removing container"`, "id="+short) {
			return "no \"removing container\" line for " + short
		}
		return ""
	})
	if r := docker(t, "rm", "-f", name); r.Code == 0 || !strings.Contains(r.Stderr, "Error response from daemon: removal of container "+name+" is already in progress") {
		t.Errorf("docker rm -f during another: %+v, want dockerd's conflict", r)
	}
	crashDaemon(t)

	if got := mustDocker(t, "inspect", "-f", "{{.State.Status}} {{.State.Dead}} {{.State.Running}} {{.State.ExitCode}}", name); got != "dead true false 137\n" {
		t.Errorf("after a crash during its removal %s is %q, want \"dead true false 137\"", name, got)
	}
	if got := mustDocker(t, "ps", "-a", "--filter", "status=dead", "--format", "{{.Names}} {{.Status}}"); !strings.Contains(got, name+" Dead\n") {
		t.Errorf("docker ps -a --filter status=dead: %q, want %s listed as Dead", got, name)
	}
	left, err := harness.ProcessesMentioning("process=husk-" + short)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range left {
		t.Errorf("the QEMU of the container being removed still runs: pid %d: %s", p.PID, p.Cmdline)
	}
	if !daemonLogHas(t, "container marked dead", "id="+short) {
		t.Errorf("no line saying the daemon marked %s dead", short)
	}
	r := docker(t, "start", name)
	if r.Code == 0 || !strings.Contains(r.Stderr, "Error response from daemon: container is marked for removal and cannot be started") {
		t.Errorf("docker start of a dead container: %+v, want dockerd's refusal", r)
	}
	if r := docker(t, "update", "--pids-limit", "10", name); r.Code == 0 || !strings.Contains(r.Stderr, "Error response from daemon: Cannot update container "+id+": container is marked for removal and cannot be \"update\"") {
		t.Errorf("docker update of a dead container: %+v, want dockerd's refusal", r)
	}
	mustDocker(t, "rm", name)
	if r := docker(t, "inspect", name); r.Code == 0 || !strings.Contains(r.Stderr, "No such") {
		t.Errorf("inspect after docker rm of the dead container: %+v", r)
	}
}

// TestLogsFollowEndsWithTheContainer: docker logs -f of a running
// container ends once the container is recorded exited, as under dockerd,
// so a script's docker rm right after it finds the container stopped.
func TestLogsFollowEndsWithTheContainer(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", "echo a; sleep 2; echo b")
	if r := docker(t, "logs", "-f", name); r != (result{Stdout: "a\nb\n"}) {
		t.Errorf("logs -f = %+v, want a and b", r)
	}
	if r := docker(t, "rm", name); r != (result{Stdout: name + "\n"}) {
		t.Errorf("rm right after logs -f ended = %+v, want the container gone", r)
	}
}
