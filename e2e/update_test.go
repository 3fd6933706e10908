package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

// TestUpdate changes restart policies and resources with docker update:
// dockerd's checks and messages, values kept in inspect, and a stopped
// container that takes new --memory and --cpus at its next start.
func TestUpdate(t *testing.T) {
	s := requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	rm := containerName(t, "-rm")
	since := fmt.Sprint(time.Now().Unix())
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img, "sleep", "1000"))
	rmID := strings.TrimSpace(mustDocker(t, "run", "-d", "--rm", "--name", rm, img, "sleep", "1000"))

	inspect := func() string {
		return mustDocker(t, "inspect", "-f", "{{json .HostConfig.RestartPolicy}} {{.HostConfig.Memory}} {{.HostConfig.MemorySwap}} {{.HostConfig.NanoCpus}} {{.HostConfig.CpuShares}}", name)
	}
	ok := result{Stdout: name + "\n"}
	for _, tt := range []struct {
		args []string
		want result
	}{
		{[]string{"--restart", "always", name}, ok},
		{[]string{"--restart", "on-failure:3", name}, ok},
		{[]string{"--restart", "always", rm}, result{Code: 1, Stderr: "Error response from daemon: Cannot update container " + rmID + ": Restart policy cannot be updated because AutoRemove is enabled for the container\n"}},
		{[]string{"--restart", "no", rm}, result{Stdout: rm + "\n"}},
		{[]string{"--memory", "256m", name}, result{Code: 1, Stderr: "Error response from daemon: Cannot update container " + id + ": Memory limit should be smaller than already set memoryswap limit, update the memoryswap at the same time\n"}},
		{[]string{"--memory", "4m", "--memory-swap", "-1", name}, result{Code: 1, Stderr: "Error response from daemon: Minimum memory limit allowed is 6MB\n"}},
		{[]string{"--cpus", "100", name}, result{Code: 1, Stderr: "Error response from daemon: Range of CPUs is from 0.01 to 2.00, as there are only 2 CPUs available\n"}},
		{[]string{"--cpu-shares", "512", name}, ok},
		{[]string{name}, result{Code: 1, Stderr: "you must provide one or more flags when using this command\n"}},
	} {
		if r := docker(t, append([]string{"update"}, tt.args...)...); r != tt.want {
			t.Errorf("update %q = %+v, want %+v", tt.args, r, tt.want)
		}
	}
	// dockerd 20.10 says "invalid restart policy 'bogus'", API 1.50's types
	// add which policies there are.
	if r := docker(t, "update", "--restart", "bogus", name); r.Code != 1 || !strings.HasPrefix(r.Stderr, "Error response from daemon: invalid restart policy") || !strings.Contains(r.Stderr, "'bogus'") {
		t.Errorf("update --restart bogus = %+v", r)
	}
	if got := inspect(); got != `{"MaximumRetryCount":3,"Name":"on-failure"} 0 0 0 512`+"\n" {
		t.Errorf("after the updates: %q", got)
	}

	// A running container's memory and CPUs: dockerd changes its cgroup;
	// husk's VM keeps the size it booted with and says so.
	args := []string{"update", "--memory", "352m", "--memory-swap", "-1", "--cpus", "2", name}
	if s.Kind == "huskd" {
		want := result{Code: 1, Stderr: "Error response from daemon: Cannot update container " + id + ": --memory and --cpus size the container's VM, which cannot be resized while it runs; stop the container, update it and start it again\n"}
		if r := docker(t, args...); r != want {
			t.Errorf("update of a running VM's size = %+v, want %+v", r, want)
		}
		mustDocker(t, "stop", "-t", "1", name)
	} else {
		mustDocker(t, "stop", "-t", "1", name)
	}
	// Stopped, the values are stored and the next start uses them.
	if r := docker(t, args...); r != ok {
		t.Errorf("update of a stopped container = %+v", r)
	}
	if got := inspect(); got != `{"MaximumRetryCount":3,"Name":"on-failure"} 369098752 -1 2000000000 512`+"\n" {
		t.Errorf("after updating the stopped container: %q", got)
	}
	mustDocker(t, "start", name)
	if s.Kind == "huskd" {
		out := mustDocker(t, "exec", name, "sh", "-c", "nproc; sed -n 's/^MemTotal: *\\([0-9]*\\) kB/\\1/p' /proc/meminfo")
		f := strings.Fields(out)
		if len(f) != 2 || f[0] != "2" {
			t.Fatalf("nproc and MemTotal after the update: %q", out)
		}
		// The guest's kernel and agent come on top of the limit.
		if kb, err := strconv.Atoi(f[1]); err != nil || kb <= 352*1024 || kb > 512*1024 {
			t.Errorf("MemTotal %s kB, want a guest of 352 MiB and its overhead", f[1])
		}
	}

	evOut := mustDocker(t, "events", "--since", since, "--until", fmt.Sprint(time.Now().Unix()+1),
		"--filter", "event=update", "--filter", "container="+id, "--format", "{{.Type}} {{.Action}} {{.Actor.Attributes.name}}")
	if want := strings.Repeat("container update "+name+"\n", 4); evOut != want {
		t.Errorf("update events = %q, want %q", evOut, want)
	}
	mustDocker(t, "rm", "-f", name, rm)
}
