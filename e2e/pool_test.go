package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// poolVMs are the pids of the processes (pooled QEMUs) whose working
// directory is in huskd's pool directory: a VM taken from the pool runs
// in its container's directory instead.
func poolVMs(t *testing.T) []int {
	t.Helper()
	return processesUnder(t, filepath.Join(suite.DaemonRoot, "pool"))
}

// processesUnder lists the pids of the processes whose working directory
// is in dir: the VMM drivers start their processes in the VM's directory.
func processesUnder(t *testing.T, dir string) []int {
	t.Helper()
	dir += "/"
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range procs {
		cwd, err := os.Readlink(filepath.Join(p, "cwd"))
		if err != nil || !strings.HasPrefix(cwd, dir) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(p)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// logCount is the number of lines of the daemon's log with every one of
// parts.
func logCount(t *testing.T, parts ...string) int {
	t.Helper()
	b, err := os.ReadFile(suite.DaemonLog)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// TestPool: huskd restarted with --pool-size 1 keeps one VM of the
// default shape restored and paused; containers run one after another
// each take it (the daemon log says so) and still see their own files,
// hostname, address and MAC, matching inspect; a pool-started container
// checkpoints and restores; a daemon killed with SIGKILL leaves no pooled
// VM behind once it is back; and a daemon stopped leaves no pooled VM or
// spare TAP.
func TestPool(t *testing.T) {
	requireBridge(t)
	if suite.VMM != "qemu" {
		t.Skip("the pool needs templates, which need QEMU's disk hot-plug")
	}
	img := pulled(t, testimages.Busybox)
	waitTemplate(t)

	ready := poolReady()
	readyBefore := logCount(t, ready)
	if err := control.do("restart-with --pool-size 1"); err != nil {
		t.Fatalf("restart huskd with --pool-size 1: %v", err)
	}
	t.Cleanup(func() {
		if err := control.do("restart-with"); err != nil {
			t.Fatalf("restart huskd without a pool: %v", err)
		}
		// The daemon drained its pool when it stopped, and the new one has
		// none.
		if pids := poolVMs(t); len(pids) > 0 {
			t.Errorf("pooled VMs %v outlived the daemon that made them", pids)
		}
		if taps := hostLinks(t, "hskp"); len(taps) > 0 {
			t.Errorf("spare TAPs %v outlived the daemon that made them", taps)
		}
	})
	waitReady := func(n int) {
		t.Helper()
		eventually(t, fmt.Sprintf("%d pooled VMs made since the restart", n), func() string {
			if got := logCount(t, ready) - readyBefore; got < n {
				return fmt.Sprintf("%d %q lines since the restart", got, ready)
			}
			return ""
		})
	}

	seen := map[string]string{}
	var names []string
	for i := range 3 {
		waitReady(i + 1)
		name := containerName(t, fmt.Sprintf("-%d", i))
		names = append(names, name)
		mustDocker(t, "run", "-d", "--name", name, "-e", "X="+name, img, "sh", "-c", templateRunScript)
		id := checkRunIdentity(t, name, seen)
		if !daemonLogHas(t, "container VM taken from the pool", "id="+id[:12]) {
			t.Errorf("%s (%s) was not taken from the pool", name, id[:12])
		}
		// The spare TAP became the container's: on the bridge, under the
		// container's TAP name.
		if taps := hostLinks(t, "hk"+id[:12]); len(taps) != 1 {
			t.Errorf("%s: TAPs %v, want one", name, taps)
		}
	}
	for _, name := range names {
		mustDocker(t, "rm", "-f", name)
	}

	// A container started from the pool checkpoints and restores.
	waitReady(4)
	long := containerName(t, "-ck")
	// The loop renames each count into place: "echo > /tmp/n" would leave
	// the file empty between its truncation and its write, and a
	// checkpoint can fall there, so a reader right after the restore
	// could find it empty.
	mustDocker(t, "run", "-d", "--name", long, img, "sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.2; done")
	id := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", long))
	if !daemonLogHas(t, "container VM taken from the pool", "id="+id[:12]) {
		t.Errorf("%s was not taken from the pool", long)
	}
	// A count past the first few tells a restored loop from one that
	// started again.
	const counted = 3
	count := func() (int, error) {
		r := docker(t, "exec", long, "cat", "/tmp/n")
		if r.Code != 0 {
			return 0, fmt.Errorf("cat /tmp/n: exit %d, stderr %q", r.Code, r.Stderr)
		}
		return strconv.Atoi(strings.TrimSpace(r.Stdout))
	}
	last := 0
	eventually(t, fmt.Sprintf("the loop has counted to %d", counted), func() string {
		n, err := count()
		if err != nil {
			return err.Error()
		}
		if last = n; n < counted {
			return fmt.Sprintf("count %d", n)
		}
		return ""
	})
	mustDocker(t, "checkpoint", "create", long, "cp")
	mustDocker(t, "start", "--checkpoint", "cp", long)
	if got := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Running}}", long)); got != "true" {
		t.Fatalf("%s after restore: running %s", long, got)
	}
	if after, err := count(); err != nil || after < last {
		t.Errorf("%s after restore: count %d (%v), want at least %d, the count before the checkpoint", long, after, err, last)
	}
	mustDocker(t, "rm", "-f", long)

	// SIGKILL: the pooled VM outlives the daemon; the next one kills it
	// and its TAP, and makes a new one.
	waitReady(5)
	before := poolVMs(t)
	if len(before) == 0 {
		t.Fatal("no pooled VM running")
	}
	crashDaemon(t)
	eventually(t, "the pooled VMs of the killed daemon are gone", func() string {
		for _, pid := range poolVMs(t) {
			if slices.Contains(before, pid) {
				return fmt.Sprintf("pid %d of the killed daemon's pool still runs", pid)
			}
		}
		return ""
	})
	waitReady(6)
	eventually(t, "one pooled VM and one spare TAP", func() string {
		if vms, taps := poolVMs(t), hostLinks(t, "hskp"); len(vms) != 1 || len(taps) != 1 {
			return fmt.Sprintf("pooled VMs %v, spare TAPs %v", vms, taps)
		}
		return ""
	})
}
