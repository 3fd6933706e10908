package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/e2e/testimages"
)

// TestResourceFlags runs --shm-size, --ulimit, --sysctl, --read-only,
// --cap-add/--cap-drop and --init; every expectation was checked against
// dockerd 20.10 (runc), where the same flags act on the container's
// namespaces and here on its guest.
func TestResourceFlags(t *testing.T) {
	s := requireSuite(t)
	img := pulled(t, testimages.Busybox)

	// Most of it in one container.
	script := `df /dev/shm | tail -1; ulimit -n; ulimit -Hn; cat /proc/sys/net/ipv4/ip_forward /proc/sys/kernel/shmmax /proc/sys/fs/mqueue/msg_max; grep Cap /proc/self/status; ` +
		`chown 1 /tmp; echo $?; touch /x; echo $?; touch /tmp/x; echo $?; touch /dev/x; echo $?; touch /dev/shm/x; echo $?; touch /etc/hosts; echo $?`
	r := docker(t, "run", "--rm", "--shm-size", "128m", "--ulimit", "nofile=1024:2048",
		"--sysctl", "net.ipv4.ip_forward=1", "--sysctl", "kernel.shmmax=1000000", "--sysctl", "fs.mqueue.msg_max=100",
		"--cap-drop", "ALL", "--cap-add", "fowner", "--read-only", "--tmpfs", "/tmp", img, "sh", "-c", script)
	wantOut := "shm 131072 0 131072 0% /dev/shm\n1024\n2048\n1\n1000000\n100\n" +
		"CapInh: 0000000000000000\nCapPrm: 0000000000000008\nCapEff: 0000000000000008\nCapBnd: 0000000000000008\nCapAmb: 0000000000000000\n" +
		"1\n1\n0\n0\n0\n1\n"
	wantErr := "chown: /tmp: Operation not permitted\ntouch: /x: Read-only file system\ntouch: /etc/hosts: Read-only file system\n"
	if got := collapseSpaces(r.Stdout); r.Code != 0 || got != wantOut || r.Stderr != wantErr {
		t.Errorf("run with resource flags: exit %d\nstdout %q\nwant   %q\nstderr %q\nwant   %q", r.Code, got, wantOut, r.Stderr, wantErr)
	}

	// Defaults, and execs: the container's limits and capabilities; a
	// non-root user none; a privileged exec all. The main process reports
	// the default /dev/shm size (TestExecNamespaces checks that an exec
	// sees the same /dev/shm).
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, "--ulimit", "nofile=1024:2048", img, "sh", "-c", "df /dev/shm | tail -1; exec sleep 1000")
	eventually(t, "the default /dev/shm size is logged", func() string {
		if got := collapseSpaces(docker(t, "logs", name).Stdout); got != "shm 65536 0 65536 0% /dev/shm\n" {
			return got
		}
		return ""
	})
	if got := mustDocker(t, "inspect", "-f", "{{.HostConfig.ShmSize}} {{json .HostConfig.Ulimits}}", name); got != `67108864 [{"Name":"nofile","Hard":2048,"Soft":1024}]`+"\n" {
		t.Errorf("inspect resources = %q", got)
	}
	if got := collapseSpaces(mustDocker(t, "exec", name, "sh", "-c", "ulimit -n; ulimit -Hn; grep Cap /proc/self/status")); got != "1024\n2048\n"+
		"CapInh: 0000000000000000\nCapPrm: 00000000a80425fb\nCapEff: 00000000a80425fb\nCapBnd: 00000000a80425fb\nCapAmb: 0000000000000000\n" {
		t.Errorf("exec sees %q", got)
	}
	if got := collapseSpaces(mustDocker(t, "exec", "-u", "1000", name, "grep", "Cap", "/proc/self/status")); got != "CapInh: 0000000000000000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 00000000a80425fb\nCapAmb: 0000000000000000\n" {
		t.Errorf("exec -u 1000 capabilities %q", got)
	}
	if s.Kind == "huskd" {
		// dockerd cannot grant more than it holds itself in this sandbox;
		// the guest agent holds them all.
		if got := collapseSpaces(mustDocker(t, "exec", "--privileged", name, "grep", "CapEff", "/proc/self/status")); got != "CapEff: 000001ffffffffff\n" {
			t.Errorf("exec --privileged capabilities %q", got)
		}
	}
	mustDocker(t, "rm", "-f", name)

	if r := docker(t, "run", "--rm", "--cap-add", "bogus", img, "true"); r != (result{Code: 125, Stderr: "docker: Error response from daemon: invalid CapAdd: unknown capability: \"CAP_BOGUS\"\n\nRun 'docker run --help' for more information\n"}) {
		t.Errorf("run --cap-add bogus = %+v", r)
	}
	pidsLimit(t, img)

	// --init: PID 1 is the init running the command; it passes on exit
	// codes and signals and reaps orphans.
	out := mustDocker(t, "run", "--rm", "--init", img, "ps")
	if !regexp.MustCompile(`(?m)^\s+1 root\s+/sbin/docker-init -- ps$`).MatchString(out) || !regexp.MustCompile(`(?m)^\s+\d+ root\s+ps$`).MatchString(out) {
		t.Errorf("ps under --init:\n%s", out)
	}
	for _, tt := range []struct {
		script string
		code   int
	}{{"exit 3", 3}, {"kill -9 $$", 137}} {
		if r := docker(t, "run", "--rm", "--init", img, "sh", "-c", tt.script); r.Code != tt.code {
			t.Errorf("run --init sh -c %q: exit %d, want %d (%+v)", tt.script, r.Code, tt.code, r)
		}
	}
	initName := containerName(t, "-init")
	mustDocker(t, "run", "-d", "--name", initName, "--init", img, "sh", "-c", `trap "exit 7" TERM; sleep 1000 & wait`)
	if got := mustDocker(t, "inspect", "-f", "{{.HostConfig.Init}}", initName); got != "true\n" {
		t.Errorf("HostConfig.Init = %q", got)
	}
	mustDocker(t, "exec", initName, "sh", "-c", "sleep 0.1 & exit 0")
	eventually(t, "the orphaned sleep is reaped", func() string {
		out := docker(t, "exec", initName, "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null | grep -c ') Z ' || true").Stdout
		if strings.TrimSpace(out) != "0" {
			return "zombies: " + out
		}
		return ""
	})
	mustDocker(t, "stop", initName)
	if got := mustDocker(t, "inspect", "-f", "{{.State.ExitCode}}", initName); got != "7\n" {
		t.Errorf("exit code after stop = %q, want 7 (SIGTERM forwarded to the trap)", got)
	}
	mustDocker(t, "rm", initName)
}

// collapseSpaces makes runs of blanks one space, so columns and tabs
// compare equal.
func collapseSpaces(s string) string {
	return regexp.MustCompile(`[ \t]+`).ReplaceAllString(s, " ")
}

// TestDevices runs --device: a host character device becomes a node of
// the same numbers, mode and owner at the container path (a directory's
// nodes under it), for the main process and its execs alike. In a husk
// VM the node is the guest kernel's device, so one the guest kernel does
// not drive (a GPU's, the case users meet), and any block device, is
// refused at start. The example is a GPU's rather than, say, TUN's, which
// one kernel drives (the minimal one make kernel builds) and another
// only as a module the guest does not load (Debian's).
func TestDevices(t *testing.T) {
	s := requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, "--device", "/dev/null:/dev/sub/xnull:r", "--device", "/dev/zero", img, "sleep", "1000")
	const script = `stat -c '%n %F %t:%T %a %u:%g' /dev/sub/xnull /dev/zero; echo x > /dev/sub/xnull; head -c 3 /dev/zero | od -An -tx1`
	want := "/dev/sub/xnull character special file 1:3 666 0:0\n/dev/zero character special file 1:5 666 0:0\n 00 00 00\n"
	if got := mustDocker(t, "exec", name, "sh", "-c", script); got != want {
		t.Errorf("an exec sees the devices as %q, want %q", got, want)
	}
	mustDocker(t, "rm", "-f", name)
	if s.Kind != "huskd" {
		return
	}
	dir := t.TempDir()
	for _, n := range []struct {
		name string
		mode uint32
		dev  int
	}{{"nvidia0", unix.S_IFCHR | 0o666, int(unix.Mkdev(195, 0))}, {"loop", unix.S_IFBLK | 0o660, int(unix.Mkdev(7, 0))}} {
		if err := unix.Mknod(filepath.Join(dir, n.name), n.mode, n.dev); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ dev, msg string }{
		{filepath.Join(dir, "nvidia0") + ":/dev/nvidia0", "device /dev/nvidia0: the guest kernel has no driver for character device 195:0 (a husk VM has none of the host's hardware)"},
		{filepath.Join(dir, "loop"), fmt.Sprintf("error gathering device information while adding custom device %q: %s is a block device, and a husk VM's block devices are its own disks", filepath.Join(dir, "loop"), filepath.Join(dir, "loop"))},
	} {
		r := docker(t, "run", "--rm", "--name", name, "--device", c.dev, img, "true")
		if want := "docker: Error response from daemon: " + c.msg + "\n\nRun 'docker run --help' for more information\n"; r.Code != 125 || r.Stderr != want {
			t.Errorf("run --device %s: exit %d, stderr %q, want 125 and %q", c.dev, r.Code, r.Stderr, want)
		}
		if got := mustDocker(t, "ps", "-a", "-q", "--filter", "name=^"+name+"$"); got != "" {
			t.Errorf("run --rm --device %s left a container: %q", c.dev, got)
		}
	}
}

// TestStorageOptSize: --storage-opt size=N sizes the container's writable
// disk, which is the root filesystem's free space as the container sees
// it. dockerd's overlay2 can do this only over xfs with project quotas,
// and refuses it on this machine.
func TestStorageOptSize(t *testing.T) {
	s := requireSuite(t)
	if s.Kind != "huskd" {
		t.Skip("dockerd's overlay2 over ext4 refuses --storage-opt size")
	}
	img := pulled(t, testimages.Busybox)
	out := mustDocker(t, "run", "--rm", "--storage-opt", "size=200M", img, "sh", "-c", "df -k / | tail -1")
	fields := strings.Fields(out)
	if len(fields) < 2 {
		t.Fatalf("df printed %q", out)
	}
	if kb, err := strconv.Atoi(fields[1]); err != nil || kb > 200<<10 || kb < 150<<10 {
		t.Errorf("root filesystem of %s KiB (%q), want a little under 200 MiB", fields[1], out)
	}
	want := "docker: Error response from daemon: Unknown option inodes\n\nRun 'docker run --help' for more information\n"
	if r := docker(t, "run", "--rm", "--storage-opt", "inodes=100", img, "true"); r.Code != 125 || r.Stderr != want {
		t.Errorf("run --storage-opt inodes=100: %+v", r)
	}
}

// pidsLimit: --pids-limit caps the main process and its execs together,
// and docker update changes it while the container runs.
func pidsLimit(t *testing.T, img string) {
	t.Helper()
	name := containerName(t, "-pids")
	mustDocker(t, "run", "-d", "--name", name, "--pids-limit", "3", img, "sleep", "1000")
	// The main process, the exec's shell and one sleep make three: the
	// second sleep cannot be forked.
	forks := []string{"exec", name, "sh", "-c", "sleep 0.1 & sleep 0.1 & wait; echo done"}
	if r := docker(t, forks...); !strings.Contains(r.Stderr, "can't fork") || r.Code == 0 {
		t.Errorf("two forks beside the main process under --pids-limit 3 = %+v, want a failed fork", r)
	}
	mustDocker(t, "update", "--pids-limit", "10", name)
	if got := mustDocker(t, "inspect", "-f", "{{.HostConfig.PidsLimit}}", name); got != "10\n" {
		t.Errorf("PidsLimit after update = %q, want 10", got)
	}
	if r := docker(t, forks...); r != (result{Stdout: "done\n"}) {
		t.Errorf("two forks after update --pids-limit 10 = %+v, want both to run", r)
	}
	mustDocker(t, "rm", "-f", name)
	// A limit set on a container started without one holds its running
	// main process too.
	mustDocker(t, "run", "-d", "--name", name, img, "sleep", "1000")
	mustDocker(t, "update", "--pids-limit", "3", name)
	forks[1] = name
	if r := docker(t, forks...); !strings.Contains(r.Stderr, "can't fork") || r.Code == 0 {
		t.Errorf("two forks beside the main process after update --pids-limit 3 = %+v, want a failed fork", r)
	}
	mustDocker(t, "rm", "-f", name)
	// husk's --init is a Go program whose threads would not fit under a
	// small limit: it stays out of the cgroup and starts its child in it.
	if got := mustDocker(t, "run", "--rm", "--init", "--pids-limit", "2", img, "echo", "ok"); got != "ok\n" {
		t.Errorf("run --init --pids-limit 2 echo ok = %q", got)
	}
}

// TestMemoryLimit: a container can use all of its --memory, going beyond
// it is an OOM kill that inspect and events report, and docker update
// changes it while the container runs, as under runc.
func TestMemoryLimit(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	// dd's buffer is as large as its block size, and filled from /dev/zero.
	fill := func(mib int) []string {
		return []string{"dd", "if=/dev/zero", "of=/dev/null", fmt.Sprintf("bs=%dM", mib), "count=1"}
	}
	name := containerName(t, "")
	since := fmt.Sprint(time.Now().Unix())
	if r := docker(t, append([]string{"run", "--name", name, "--memory", "32m", img}, fill(64)...)...); r.Code != 137 {
		t.Errorf("64 MiB under --memory 32m = %+v, want an OOM kill (exit 137)", r)
	}
	if got := mustDocker(t, "inspect", "-f", "{{.State.ExitCode}} {{.State.OOMKilled}}", name); got != "137 true\n" {
		t.Errorf("ExitCode OOMKilled = %q, want 137 true", got)
	}
	ev := mustDocker(t, "events", "--since", since, "--until", fmt.Sprint(time.Now().Unix()+1),
		"--filter", "container="+name, "--filter", "event=oom", "--filter", "event=die", "--format", "{{.Action}}")
	if ev != "oom\ndie\n" {
		t.Errorf("events = %q, want oom then die", ev)
	}
	mustDocker(t, "rm", name)

	if r := docker(t, append([]string{"run", "--rm", "--memory", "64m", img}, fill(48)...)...); r.Code != 0 {
		t.Errorf("48 MiB under --memory 64m = %+v, want room for it", r)
	}

	mustDocker(t, "run", "-d", "--name", name, "--memory", "128m", img, "sleep", "1000")
	if r := docker(t, append([]string{"exec", name}, fill(96)...)...); r.Code != 0 {
		t.Errorf("96 MiB under --memory 128m = %+v, want room for it", r)
	}
	mustDocker(t, "update", "--memory", "64m", name)
	if r := docker(t, append([]string{"exec", name}, fill(96)...)...); r.Code != 137 {
		t.Errorf("96 MiB after update --memory 64m = %+v, want an OOM kill", r)
	}
	// The usage is the container's, not its guest's kernel's and agent's.
	got := mustDocker(t, "stats", "--no-stream", "--format", "{{.MemUsage}} {{.MemPerc}}", name)
	f := strings.Fields(got)
	perc, err := strconv.ParseFloat(strings.TrimSuffix(f[len(f)-1], "%"), 64)
	if !strings.Contains(got, " / 64MiB ") || err != nil || perc >= 50 {
		t.Errorf("stats after the update = %q, want an idle container's usage of a 64MiB limit", got)
	}
	mustDocker(t, "rm", "-f", name)
}

// TestDefaultUlimits: without --ulimit, a container's processes (a
// non-root user's too) get the limits of a current Docker Engine's
// containers: 1024 open files up to 524288, processes unlimited. The
// reference dockerd's come from the process it was started from, so the
// test is husk's alone.
func TestDefaultUlimits(t *testing.T) {
	if requireSuite(t).Kind != "huskd" {
		t.Skip("the reference dockerd's containers inherit the limits of the process that started it")
	}
	img := pulled(t, testimages.Busybox)
	r := docker(t, "run", "--rm", "-u", "app", img, "sh", "-c", "ulimit -n; ulimit -Hn; ulimit -u; ulimit -Hu")
	if want := "1024\n524288\nunlimited\nunlimited\n"; r.Stdout != want || r.Code != 0 {
		t.Errorf("limits = %q (exit %d, stderr %q), want %q", r.Stdout, r.Code, r.Stderr, want)
	}
	// --ulimit still sets the container's own.
	if got := mustDocker(t, "run", "--rm", "--ulimit", "nproc=50:60", img, "sh", "-c", "ulimit -u; ulimit -Hu"); got != "50\n60\n" {
		t.Errorf("--ulimit nproc=50:60: %q", got)
	}
}

// TestCgroupMount: a container sees its cgroup at /sys/fs/cgroup,
// read-only, as on a cgroup v2 host: the path /proc/self/cgroup names
// leads to the limits (what the JVM and Go's GOMAXPROCS read).
func TestCgroupMount(t *testing.T) {
	if requireSuite(t).Kind != "huskd" {
		t.Skip("the reference dockerd runs on cgroup v1")
	}
	img := pulled(t, testimages.Busybox)
	script := `g=/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup); grep -c ' /sys/fs/cgroup cgroup2 ro,' /proc/mounts; ` +
		`cat $g/memory.max $g/cpu.max 2>&1; test -f /sys/fs/cgroup/cgroup.controllers && echo controllers; ` +
		`mkdir /sys/fs/cgroup/x 2>/dev/null || echo read-only`
	if got := mustDocker(t, "run", "--rm", "--memory", "64m", "--cpus", "0.5", img, "sh", "-c", script); got != "1\n67108864\n50000 100000\ncontrollers\nread-only\n" {
		t.Errorf("with limits: %q", got)
	}
	// A limit that leaves the VM's shape alone starts from the image's
	// template, whose container init mounted cgroup2 before the agent
	// did: the agent's mount must still be writable.
	waitTemplate(t)
	waitImageTemplate(t, img, 0)
	if got := mustDocker(t, "run", "--rm", "--pids-limit", "50", img, "cat", "/sys/fs/cgroup/container/pids.max"); got != "50\n" {
		t.Errorf("--pids-limit 50: pids.max %q", got)
	}
	// Without a limit the container has no group of its own: it sees the
	// guest's root, where there is no memory.max.
	if got := mustDocker(t, "run", "--rm", img, "sh", "-c", "cat /proc/self/cgroup; test -f /sys/fs/cgroup/cgroup.controllers && echo controllers"); got != "0::/\ncontrollers\n" {
		t.Errorf("without limits: %q", got)
	}
}

// TestPrivileged: --privileged gives the container /sys and its cgroup
// read-write and the guest's devices in /dev, as runc gives a
// privileged container the host's; without it, neither.
func TestPrivileged(t *testing.T) {
	if requireSuite(t).Kind != "huskd" {
		t.Skip("the reference dockerd cannot run privileged containers (its runc is refused the capabilities)")
	}
	img := pulled(t, testimages.Busybox)
	// From the image's template, whose container init made /sys
	// read-only before it knew the container.
	waitTemplate(t)
	waitImageTemplate(t, img, 0)
	script := `grep -E ' /sys(/fs/cgroup)? ' /proc/mounts | cut -d' ' -f2,4 | cut -d, -f1; ` +
		`test -c /dev/kmsg && echo kmsg; ls /dev | grep -q -E '^(sd|vd)[a-z]$' && test -b /dev/$(ls /dev | grep -E '^(sd|vd)[a-z]$' | head -1) && echo disk; ` +
		`mkdir /sys/fs/cgroup/sub 2>/dev/null && rmdir /sys/fs/cgroup/sub && echo cgroup-writable; true`
	if got := mustDocker(t, "run", "--rm", "--privileged", img, "sh", "-c", script); got != "/sys rw\n/sys/fs/cgroup rw\nkmsg\ndisk\ncgroup-writable\n" {
		t.Errorf("--privileged: %q", got)
	}
	if got := mustDocker(t, "run", "--rm", img, "sh", "-c", script); got != "/sys ro\n/sys/fs/cgroup ro\n" {
		t.Errorf("unprivileged: %q", got)
	}
}

// TestCPUQuota: --cpus below the VM's vCPUs holds a busy container to its
// share, as runc's cgroup does; the stats' throttling data count the
// periods its quota ran out in. A docker update gives a running
// container one, and one without a quota is never throttled.
func TestCPUQuota(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	limited, updated := containerName(t, "-limited"), containerName(t, "-updated")
	busy := []string{"sh", "-c", "while :; do :; done"}
	mustDocker(t, append([]string{"run", "-d", "--name", limited, "--cpus", "0.5", img}, busy...)...)
	mustDocker(t, append([]string{"run", "-d", "--name", updated, img}, busy...)...)
	stats := func(name string) container.StatsResponse {
		var st container.StatsResponse
		apiJSON(t, http.MethodGet, "/containers/"+name+"/stats?stream=false", "", http.StatusOK, &st)
		return st
	}
	throttling := func(name string) container.ThrottlingData { return stats(name).CPUStats.ThrottlingData }
	throttled := func(name string) func() string {
		return func() string {
			if d := throttling(name); d.ThrottledPeriods == 0 || d.Periods < d.ThrottledPeriods || d.ThrottledTime == 0 {
				return fmt.Sprintf("throttling data %+v", d)
			}
			return ""
		}
	}
	eventually(t, "--cpus 0.5 throttles a busy loop", throttled(limited))
	if d := throttling(updated); d.ThrottledPeriods != 0 {
		t.Errorf("a container without a quota was throttled: %+v", d)
	}
	mustDocker(t, "update", "--cpus", "0.5", updated)
	if got := mustDocker(t, "inspect", "-f", "{{.HostConfig.NanoCpus}}", updated); got != "500000000\n" {
		t.Errorf("NanoCpus after the update = %q", got)
	}
	eventually(t, "update --cpus 0.5 throttles a running busy loop", throttled(updated))
	// What it used before the update still counts.
	if st := stats(updated); st.MemoryStats.Usage == 0 {
		t.Errorf("memory usage after the update = 0: %+v", st.MemoryStats)
	}
	mustDocker(t, "rm", "-f", limited, updated)
}

// threadCPUs is the Cpus_allowed_list of every thread of pid, deduplicated.
func threadCPUs(t *testing.T, pid string) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/" + pid + "/task/*/status")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of %s: %v", pid, err)
	}
	seen := map[string]bool{}
	var out []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && !seen[strings.TrimSpace(v)] {
				seen[strings.TrimSpace(v)] = true
				out = append(out, strings.TrimSpace(v))
			}
		}
	}
	return out
}

// TestCpusetCpus: --cpuset-cpus keeps the container (here every thread
// of its VMM; under dockerd its processes) on the CPUs it names, docker
// update moves it, and CPUs the host lacks are refused in dockerd's words.
func TestCpusetCpus(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, "--cpuset-cpus", "0", img, "sleep", "1000")
	pid := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Pid}}", name))
	if got := threadCPUs(t, pid); len(got) != 1 || got[0] != "0" {
		t.Errorf("threads of the container's process %s may run on %v, want only 0", pid, got)
	}
	// What the container sees of its CPUs, which sizes thread pools (Go's
	// GOMAXPROCS, nproc), is the set too.
	seen := func() string {
		return strings.TrimSpace(mustDocker(t, "exec", name, "sh", "-c", "grep Cpus_allowed_list /proc/self/status; nproc"))
	}
	if got := seen(); got != "Cpus_allowed_list:\t0\n1" {
		t.Errorf("in the container: %q, want CPU 0 alone", got)
	}
	all := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	if runtime.NumCPU() == 1 {
		all = "0"
	}
	mustDocker(t, "update", "--cpuset-cpus", all, name)
	if got := threadCPUs(t, pid); len(got) != 1 || got[0] != all {
		t.Errorf("after update --cpuset-cpus %s: threads may run on %v", all, got)
	}
	// Every CPU of the VM's, which may have fewer than the host.
	if got := seen(); runtime.NumCPU() > 1 && !strings.HasPrefix(got, "Cpus_allowed_list:\t0-") {
		t.Errorf("in the container after update --cpuset-cpus %s: %q, want more CPUs than 0", all, got)
	}
	mustDocker(t, "rm", "-f", name)
	r := docker(t, "run", "--rm", "--cpuset-cpus", "4095", img, "true")
	if r.Code != 125 || !strings.Contains(r.Stderr, "Requested CPUs are not available - requested 4095, available: "+all) {
		t.Errorf("--cpuset-cpus 4095: %+v, want dockerd's refusal", r)
	}
}

// TestDefaultRuntime: a container created without --runtime records the
// daemon's default one, which docker info names, as dockerd records runc.
func TestDefaultRuntime(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "create", "--name", name, img, "true")
	def := mustDocker(t, "info", "-f", "{{.DefaultRuntime}}")
	if got := mustDocker(t, "inspect", "-f", "{{.HostConfig.Runtime}}", name); got != def || def == "\n" {
		t.Errorf("HostConfig.Runtime = %q, want the default runtime %q", got, def)
	}
	mustDocker(t, "rm", name)
}

// TestInfoPlugins: docker info lists the volume, network and log drivers
// the daemon has, which clients read before they ask for one.
func TestInfoPlugins(t *testing.T) {
	requireSuite(t)
	for kind, want := range map[string][]string{
		"Volume":  {"local"},
		"Network": {"bridge", "null"},
		"Log":     {"json-file", "local"},
	} {
		var got []string
		if err := json.Unmarshal([]byte(mustDocker(t, "info", "-f", "{{json .Plugins."+kind+"}}")), &got); err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("docker info Plugins.%s = %q, want %s in it", kind, got, w)
			}
		}
	}
	// RegistryConfig too: templates and SDKs read it (it was null).
	tmpl := `{{(index .RegistryConfig.IndexConfigs "docker.io").Secure}} {{range .RegistryConfig.InsecureRegistryCIDRs}}{{.}} {{end}}`
	if out := mustDocker(t, "info", "-f", tmpl); !strings.HasPrefix(out, "true ") || !strings.Contains(out, "127.0.0.0/8") {
		t.Errorf("docker info RegistryConfig: %q, want Docker Hub's index secure and loopback insecure", out)
	}
	// The suite's huskd runs with --debug: docker info says so, with the
	// figures dockerd gives in debug mode.
	if suite.Kind == "huskd" && os.Getenv(benchEnv) != "1" {
		if out := mustDocker(t, "info", "-f", "{{.Debug}} {{gt .NFd 0}} {{gt .NGoroutines 0}}"); out != "true true true\n" {
			t.Errorf("docker info Debug, NFd > 0, NGoroutines > 0: %q, want true for each", out)
		}
	}
}
