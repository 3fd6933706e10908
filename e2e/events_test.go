package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

// eventFormat prints what the tests compare of each event.
const eventFormat = `{{.Type}} {{.Action}} {{.Actor.Attributes.name}} exitCode={{.Actor.Attributes.exitCode}} signal={{.Actor.Attributes.signal}}`

// pastEvents is `docker events` between since and now, filtered.
func pastEvents(t *testing.T, since string, filters ...string) []string {
	t.Helper()
	args := []string{"events", "--since", since, "--until", fmt.Sprint(time.Now().Unix() + 1), "--format", eventFormat}
	for _, f := range filters {
		args = append(args, "--filter", f)
	}
	out := strings.TrimSpace(mustDocker(t, args...))
	if out == "" {
		return nil
	}
	return strings.Split(strings.ReplaceAll(out, "<no value>", ""), "\n")
}

func TestEvents(t *testing.T) {
	s := requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	renamed := containerName(t, "-renamed")
	since := eventsNow()

	// A live stream, filtered to the container's start events, sees one
	// that happens after it began.
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	live := exec.CommandContext(ctx, s.DockerCLI, "events", "--filter", "event=start", "--filter", "type=container",
		"--filter", "label=e2e.events", "--format", "{{json .}}")
	live.Env = dockerEnv()
	pipe, err := live.StdoutPipe()
	must(t, err)
	must(t, live.Start())
	defer func() { cancel(); _ = live.Wait() }()

	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, "--label", "e2e.events=yes", img, "sleep", "1000"))
	line, err := bufio.NewReader(pipe).ReadString('\n')
	must(t, err)
	var ev map[string]any
	must(t, json.Unmarshal([]byte(line), &ev))
	actor, _ := ev["Actor"].(map[string]any)
	attrs, _ := actor["Attributes"].(map[string]any)
	for k, want := range map[string]any{"Type": "container", "Action": "start", "status": "start", "id": id, "from": img, "scope": "local"} {
		if ev[k] != want {
			t.Errorf("live event %s = %v, want %v (%s)", k, ev[k], want, line)
		}
	}
	if actor["ID"] != id || attrs["name"] != name || attrs["image"] != img || attrs["e2e.events"] != "yes" {
		t.Errorf("live event actor = %v", actor)
	}
	if tn, _ := ev["timeNano"].(float64); tn <= 0 || int64(tn)/1e9 != int64(ev["time"].(float64)) {
		t.Errorf("live event time %v, timeNano %v", ev["time"], ev["timeNano"])
	}

	mustDocker(t, "exec", name, "true")
	mustDocker(t, "pause", name)
	mustDocker(t, "unpause", name)
	mustDocker(t, "rename", name, renamed)
	mustDocker(t, "cp", renamed+":/etc/hostname", t.TempDir())
	src := filepath.Join(t.TempDir(), "f")
	must(t, os.WriteFile(src, []byte("x"), 0o644))
	mustDocker(t, "cp", src, renamed+":/tmp/")
	mustDocker(t, "restart", "-t", "1", renamed)
	mustDocker(t, "kill", renamed)
	mustDocker(t, "rm", renamed)

	want := []string{
		"container create " + name + " exitCode= signal=",
		"container start " + name + " exitCode= signal=",
		"container exec_create: true  " + name + " exitCode= signal=",
		"container exec_start: true  " + name + " exitCode= signal=",
		"container exec_die " + name + " exitCode=0 signal=",
		"container pause " + name + " exitCode= signal=",
		"container unpause " + name + " exitCode= signal=",
		"container rename " + renamed + " exitCode= signal=",
		"container archive-path " + renamed + " exitCode= signal=",
		"container extract-to-dir " + renamed + " exitCode= signal=",
		// sleep, the container's PID 1, ignores SIGTERM.
		"container kill " + renamed + " exitCode= signal=15",
		"container kill " + renamed + " exitCode= signal=9",
		"container die " + renamed + " exitCode=137 signal=",
		"container stop " + renamed + " exitCode= signal=",
		"container start " + renamed + " exitCode= signal=",
		"container restart " + renamed + " exitCode= signal=",
		"container kill " + renamed + " exitCode= signal=9",
		"container die " + renamed + " exitCode=137 signal=",
		"container destroy " + renamed + " exitCode= signal=",
	}
	got := pastEvents(t, since, "container="+id)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events of the container:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Filters: by event, and by the image a container ran.
	if got := pastEvents(t, since, "container="+id, "event=die"); len(got) != 2 || got[1] != want[17] {
		t.Errorf("event=die: %q", got)
	}
	if got := pastEvents(t, since, "image="+img, "event=create", "label=e2e.events=yes"); len(got) != 1 || got[0] != want[0] {
		t.Errorf("image=%s event=create: %q", img, got)
	}
	if got := pastEvents(t, since, "container="+id, "event=exec_start"); len(got) != 1 || got[0] != want[3] {
		t.Errorf("event=exec_start: %q", got)
	}

	// Image events: tag and untag, the image's ID as actor.
	tagged := "e2e-events-tag:v1"
	imgID := strings.TrimSpace(mustDocker(t, "image", "inspect", "-f", "{{.Id}}", img))
	mustDocker(t, "tag", img, tagged)
	mustDocker(t, "rmi", tagged)
	got = pastEvents(t, since, "type=image", "image="+imgID)
	wantImg := []string{
		"image tag " + tagged + " exitCode= signal=",
		"image untag " + imgID + " exitCode= signal=",
	}
	if strings.Join(got, "\n") != strings.Join(wantImg, "\n") {
		t.Errorf("image events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantImg, "\n"))
	}
	// Removing an image deletes its layers too; only the image is an
	// event.
	committer := containerName(t, "-commit")
	mustDocker(t, "run", "--name", committer, img, "sh", "-c", "echo x > /new")
	committed := strings.TrimSpace(mustDocker(t, "commit", committer, "e2e-events-commit:v1"))
	mustDocker(t, "rm", committer)
	mustDocker(t, "rmi", "e2e-events-commit:v1")
	if got := pastEvents(t, since, "type=image", "event=delete"); len(got) != 1 || !strings.HasPrefix(got[0], "image delete "+committed+" ") {
		t.Errorf("delete events of removing a committed image: %q, want one, of %s", got, committed)
	}

	// dockerd 20.10 ignores filters it does not know; an until in the
	// past ends the stream at once.
	if r := docker(t, "events", "--filter", "colour=red", "--until", "1"); r != (result{}) {
		t.Errorf("unknown filter, until in the past: %+v", r)
	}
}

// TestResourceEvents: volumes and networks have dockerd's events, in
// dockerd's order around a container's: created, connected and mounted
// before it starts, disconnected and unmounted after it dies, destroyed.
func TestResourceEvents(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	since := eventsNow()
	vol, netName, ctr := namePrefix(t)+"-vol", namePrefix(t)+"-net", containerName(t, "")
	t.Cleanup(func() { docker(t, "volume", "rm", "-f", vol); docker(t, "network", "rm", netName) })

	netID := strings.TrimSpace(mustDocker(t, "network", "create", netName))
	mustDocker(t, "volume", "create", vol)
	id := strings.TrimSpace(mustDocker(t, "create", "--name", ctr, "--network", netName, "-v", vol+":/data", img, "true"))
	mustDocker(t, "start", "-a", ctr)
	mustDocker(t, "rm", ctr)
	mustDocker(t, "volume", "rm", vol)
	mustDocker(t, "network", "rm", netName)

	out := mustDocker(t, "events", "--since", since, "--until", fmt.Sprint(time.Now().Unix()+1),
		"--filter", "type=volume", "--filter", "type=network", "--filter", "type=container",
		"--format", "{{.Type}} {{.Action}} {{.Actor.ID}} {{json .Actor.Attributes}}")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, id) && !strings.Contains(line, netID) && !strings.Contains(line, vol) {
			continue
		}
		line = strings.NewReplacer(id, "CTR", netID, "NET", `"image":"`+img+`"`, `"image":"IMG"`).Replace(line)
		got = append(got, line)
	}
	want := []string{
		`network create NET {"name":"` + netName + `","type":"bridge"}`,
		`volume create ` + vol + ` {"driver":"local"}`,
		// Again, as the container's -v takes it.
		`volume create ` + vol + ` {"driver":"local"}`,
		`container create CTR {"image":"IMG","name":"` + ctr + `"}`,
		`container attach CTR {"image":"IMG","name":"` + ctr + `"}`,
		`network connect NET {"container":"CTR","name":"` + netName + `","type":"bridge"}`,
		`volume mount ` + vol + ` {"container":"CTR","destination":"/data","driver":"local","propagation":"","read/write":"true"}`,
		`container start CTR {"image":"IMG","name":"` + ctr + `"}`,
		`container die CTR {"exitCode":"0","image":"IMG","name":"` + ctr + `"}`,
		`network disconnect NET {"container":"CTR","name":"` + netName + `","type":"bridge"}`,
		`volume unmount ` + vol + ` {"container":"CTR","driver":"local"}`,
		`container destroy CTR {"image":"IMG","name":"` + ctr + `"}`,
		`volume destroy ` + vol + ` {"driver":"local"}`,
		`network destroy NET {"name":"` + netName + `","type":"bridge"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// eventsNow is now as docker events' --since takes it, to the nanosecond:
// the whole second before, which the tests used to give, took in the last
// events of the test before (its cleanup's image deletes, say).
func eventsNow() string {
	now := time.Now()
	return fmt.Sprintf("%d.%09d", now.Unix(), now.Nanosecond())
}
