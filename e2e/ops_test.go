package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

func TestPauseTopRenameRestart(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	renamed := containerName(t, "-renamed")
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img, "sleep", "1000"))

	// top: ps -ef's columns, the main process first among the container's.
	eventually(t, "top lists the main process", func() string {
		out := docker(t, "top", name).Stdout
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 2 || strings.Join(strings.Fields(lines[0]), " ") != "UID PID PPID C STIME TTY TIME CMD" {
			return "top = " + out
		}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) >= 9 && f[0] == "root" && f[5] == "?" && strings.Join(f[7:], " ") == "sleep 1000" {
				return ""
			}
		}
		return "no sleep 1000 row in " + out
	})
	// top with ps options: ps's columns for them, and dockerd's errors.
	for _, tt := range []struct {
		args    []string
		titles  string
		sleepAt int // the column that reads "sleep" in the main process's row
		stat    int // the column of its STAT, -1 for none
	}{
		{[]string{"aux"}, "USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND", 10, 7},
		{[]string{"ax"}, "PID TTY STAT TIME COMMAND", 4, 2},
		{[]string{"-e"}, "PID TTY TIME CMD", 3, -1},
		{[]string{"-o", "pid,comm"}, "PID COMMAND", 1, -1},
		{[]string{"-eo", "pid,ppid,user,group,stat,nice,etime,args"}, "PID PPID USER GROUP STAT NI ELAPSED COMMAND", 7, 4},
		{[]string{"-o", "pid=ID,args"}, "", 0, 0},
	} {
		r := docker(t, append([]string{"top", name}, tt.args...)...)
		if tt.titles == "" {
			if want := (result{Code: 1, Stderr: "Error response from daemon: Couldn't find PID field in ps output\n"}); r != want {
				t.Errorf("top %q = %+v, want %+v", tt.args, r, want)
			}
			continue
		}
		lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
		if r.Code != 0 || strings.Join(strings.Fields(lines[0]), " ") != tt.titles {
			t.Errorf("top %q = %+v, want the titles %q", tt.args, r, tt.titles)
			continue
		}
		found := false
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) > tt.sleepAt && f[tt.sleepAt] == "sleep" {
				found = true
				// The main process leads its session.
				if tt.stat >= 0 && f[tt.stat] != "Ss" {
					t.Errorf("top %q: STAT of the main process %q, want Ss", tt.args, f[tt.stat])
				}
			}
		}
		if !found {
			t.Errorf("top %q: no row with sleep in column %d: %q", tt.args, tt.sleepAt, r.Stdout)
		}
	}
	// RSS is the process's resident set; busybox's sleep has a few hundred
	// KiB of it. (The guest kernel's own per-process count of a process
	// that mostly sleeps reads a few KiB.)
	rssRow := ""
	for _, l := range strings.Split(mustDocker(t, "top", name, "-o", "pid,rss,args"), "\n") {
		if strings.HasSuffix(l, "sleep 1000") {
			rssRow = l
		}
	}
	if f := strings.Fields(rssRow); len(f) < 2 || atoiOr(f[1], 0) < 100 {
		t.Errorf("top -o pid,rss,args: sleep's row %q, want an RSS of 100 KiB or more", rssRow)
	}
	if r, want := docker(t, "top", name, "-o", "foo"), (result{Code: 1, Stderr: "Error response from daemon: ps: error: unknown user-defined format specifier \"foo\"\n"}); r != want {
		t.Errorf("top with an unknown column = %+v, want %+v", r, want)
	}

	// pause: the VM stops; ps, inspect and exec say so; unpause undoes it.
	if r := docker(t, "pause", name); r != (result{Stdout: name + "\n"}) {
		t.Errorf("pause = %+v", r)
	}
	if r := docker(t, "pause", name); r != (result{Code: 1, Stderr: "Error response from daemon: Container " + id + " is already paused\n"}) {
		t.Errorf("second pause = %+v", r)
	}
	if got := mustDocker(t, "ps", "--filter", "name=^"+name+"$", "--format", "{{.State}}|{{.Status}}"); !strings.HasPrefix(got, "paused|Up ") || !strings.HasSuffix(got, " (Paused)\n") {
		t.Errorf("ps of a paused container = %q", got)
	}
	if got := mustDocker(t, "inspect", "-f", "{{.State.Status}} {{.State.Paused}} {{.State.Running}}", name); got != "paused true true\n" {
		t.Errorf("inspect of a paused container = %q", got)
	}
	if r := docker(t, "exec", name, "true"); r != (result{Code: 1, Stderr: "Error response from daemon: Container " + name + " is paused, unpause the container before exec\n"}) {
		t.Errorf("exec into a paused container = %+v", r)
	}
	if r := docker(t, "unpause", name); r != (result{Stdout: name + "\n"}) {
		t.Errorf("unpause = %+v", r)
	}
	if r := docker(t, "unpause", name); r != (result{Code: 1, Stderr: "Error response from daemon: Container " + id + " is not paused\n"}) {
		t.Errorf("second unpause = %+v", r)
	}
	if r := docker(t, "exec", name, "echo", "alive"); r != (result{Stdout: "alive\n"}) {
		t.Errorf("exec after unpause = %+v", r)
	}

	// rename, with dockerd's refusals.
	other := containerName(t, "-other")
	mustDocker(t, "create", "--name", other, img, "true")
	for _, tt := range []struct {
		to  string
		err string
	}{
		{other, "Error when allocating new name: Conflict. The container name \"/" + other + "\" is already in use by container \"" +
			strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", other)) + "\". You have to remove (or rename) that container to be able to reuse that name."},
		{"bad name", "Error when allocating new name: Invalid container name (/bad name), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed"},
		{name, "Renaming a container with the same name as its current name"},
	} {
		want := result{Code: 1, Stderr: "Error response from daemon: " + tt.err + "\nError: failed to rename container named " + name + "\n"}
		if r := docker(t, "rename", name, tt.to); r != want {
			t.Errorf("rename to %q = %+v, want %+v", tt.to, r, want)
		}
	}
	if r := docker(t, "rename", name, renamed); r != (result{}) {
		t.Errorf("rename = %+v", r)
	}
	if got := mustDocker(t, "inspect", "-f", "{{.Name}}", id); got != "/"+renamed+"\n" {
		t.Errorf("name after rename = %q", got)
	}

	// port: nothing is published until networking exists.
	if r := docker(t, "port", renamed); r != (result{}) {
		t.Errorf("port = %+v", r)
	}
	if r := docker(t, "port", renamed, "80"); r != (result{Code: 1, Stderr: "Error: No public port '80' published for " + renamed + "\n"}) {
		t.Errorf("port 80 = %+v", r)
	}

	// restart: a manual restart does not count; a paused container stops.
	if r := docker(t, "restart", "-t", "1", renamed); r != (result{Stdout: renamed + "\n"}) {
		t.Errorf("restart = %+v", r)
	}
	if got := mustDocker(t, "inspect", "-f", "{{.RestartCount}} {{.State.Running}}", renamed); got != "0 true\n" {
		t.Errorf("after restart: %q", got)
	}
	mustDocker(t, "pause", renamed)
	if r := docker(t, "stop", "-t", "1", renamed); r != (result{Stdout: renamed + "\n"}) {
		t.Errorf("stop of a paused container = %+v", r)
	}
	if got := mustDocker(t, "inspect", "-f", "{{.State.Status}} {{.State.Paused}} {{.State.ExitCode}}", renamed); got != "exited false 137\n" {
		t.Errorf("after stopping a paused container: %q", got)
	}
	if r := docker(t, "pause", renamed); r != (result{Code: 1, Stderr: "Error response from daemon: Container " + id + " is not running\n"}) {
		t.Errorf("pause of a stopped container = %+v", r)
	}
	if r := docker(t, "top", renamed); r != (result{Code: 1, Stderr: "Error response from daemon: Container " + id + " is not running\n"}) {
		t.Errorf("top of a stopped container = %+v", r)
	}
	mustDocker(t, "rm", renamed, other)
}

func TestPruneAndWaitConditions(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	running := containerName(t, "-running")
	id := strings.TrimSpace(mustDocker(t, "create", "--label", "e2e-prune=1", "--name", name, img, "sh", "-c", "exit 3"))
	mustDocker(t, "run", "-d", "--label", "e2e-prune=1", "--name", running, img, "sleep", "1000")

	// next-exit waits through a start; removed waits for the removal.
	nextExit := startWait(t, name, "next-exit")
	removed := startWait(t, name, "removed")
	mustDocker(t, "start", name)
	if got := nextExit(); got != `3 <nil>` {
		t.Errorf("wait next-exit = %s", got)
	}
	// dockerd 20.10 reads an unknown condition as not-running.
	var w struct{ StatusCode int }
	apiJSON(t, "POST", "/containers/"+name+"/wait?condition=bogus", "", http.StatusOK, &w)
	if w.StatusCode != 3 {
		t.Errorf("wait with an unknown condition: %+v", w)
	}

	want := result{Stdout: "Deleted Containers:\n" + id + "\n\nTotal reclaimed space: 0B\n"}
	if r := docker(t, "container", "prune", "-f", "--filter", "label=e2e-prune=1"); r != want {
		t.Errorf("prune = %+v, want %+v", r, want)
	}
	if got := removed(); got != `3 <nil>` {
		t.Errorf("wait removed = %s", got)
	}
	if r := api(t, "POST", "/containers/prune?filters=%7B%22bogus%22%3A%5B%22x%22%5D%7D", ""); r.Status != http.StatusBadRequest ||
		r.Body != errorMessage(unknownFilter("bogus")) {
		t.Errorf("prune with a bad filter = %d %q", r.Status, r.Body)
	}
	var report struct{ ContainersDeleted []string }
	apiJSON(t, "POST", "/containers/prune", "", http.StatusOK, &report)
	if got := mustDocker(t, "inspect", "-f", "{{.State.Running}}", running); got != "true\n" {
		t.Errorf("prune touched a running container: %q", got)
	}
	mustDocker(t, "rm", "-f", running)
}

// startWait sends POST /containers/{name}/wait?condition=cond and returns
// once the daemon has registered it (dockerd sends the headers then); the
// function it returns reads the answer.
func startWait(t *testing.T, name, cond string) func() string {
	t.Helper()
	sock := strings.TrimPrefix(suite.DockerHost, "unix://")
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	req, err := http.NewRequestWithContext(ctx, "POST", "http://docker/v1.41/containers/"+name+"/wait?condition="+cond, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("wait %s: %v", cond, err)
	}
	return func() string {
		defer cancel()
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("wait %s: %v", cond, err)
		}
		var v struct {
			StatusCode int
			Error      *struct{ Message string }
		}
		if json.Unmarshal(b, &v) != nil {
			return string(b)
		}
		if v.Error != nil {
			return fmt.Sprintf("%d %s", v.StatusCode, v.Error.Message)
		}
		return fmt.Sprintf("%d <nil>", v.StatusCode)
	}
}

// atoiOr is s as a number, or def when it is not one.
func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}
