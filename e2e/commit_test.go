package e2e

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

var imageIDLine = regexp.MustCompile(`^sha256:[0-9a-f]{64}\n$`)

// TestDiffCommitExport changes a running container's files through exec,
// then reads them back as docker diff, a committed image and an export,
// running and stopped; every expectation was checked against dockerd.
func TestDiffCommitExport(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	clean := containerName(t, "-clean")
	const tag, emptyTag = "e2e-commit:v1", "e2e-commit:empty"
	t.Cleanup(func() {
		cmd := exec.Command(suite.DockerCLI, "rmi", tag, emptyTag)
		cmd.Env = dockerEnv()
		_ = cmd.Run()
	})
	since := fmt.Sprint(time.Now().Unix())
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img, "sleep", "1000"))

	// A fresh container has no changes, even with the files the daemon
	// puts in for it (/etc/hosts and the like).
	if r := docker(t, "diff", name); r != (result{}) {
		t.Errorf("diff of a fresh container = %+v", r)
	}
	mustDocker(t, "exec", name, "sh", "-c", "echo hi > /tmp/new; mkdir -p /data/sub; echo x > /data/sub/f; echo changed >> /etc/passwd; rm /bin/ls")
	wantDiff := "C /bin\nD /bin/ls\nA /data\nA /data/sub\nA /data/sub/f\nC /etc\nC /etc/passwd\nC /tmp\nA /tmp/new\n"
	// dockerd 20.10's order varies from one call to the next (its naive
	// diff walks maps); husk's is the walk's, parents first.
	if r := docker(t, "diff", name); r.Code != 0 || r.Stderr != "" || sortedLines(r.Stdout) != sortedLines(wantDiff) {
		t.Errorf("diff = %+v, want stdout %q", r, wantDiff)
	}

	// dockerd's refusals.
	for _, tt := range []struct {
		args []string
		want result
	}{
		{[]string{"commit", "-c", "FROM x", name}, result{Code: 1, Stderr: "Error response from daemon: from is not a valid change command\n"}},
		{[]string{"commit", "-c", "BOGUS x", name}, result{Code: 1, Stderr: "Error response from daemon: bogus is not a valid change command\n"}},
		{[]string{"commit", "nope"}, result{Code: 1, Stderr: "Error response from daemon: No such container: nope\n"}},
		{[]string{"diff", "nope"}, result{Code: 1, Stderr: "Error response from daemon: No such container: nope\n"}},
		{[]string{"export", "nope"}, result{Code: 1, Stderr: "Error response from daemon: No such container: nope\n"}},
	} {
		if r := docker(t, tt.args...); r != tt.want {
			t.Errorf("docker %q = %+v, want %+v", tt.args, r, tt.want)
		}
	}

	// commit: the changes become a layer, --change the config.
	out := mustDocker(t, "commit", "-c", `CMD ["cat","/data/sub/f"]`, "-c", "ENV ADDED=1", "-m", "a message", "-a", "me", name, tag)
	if !imageIDLine.MatchString(out) {
		t.Fatalf("commit printed %q, want an image ID", out)
	}
	imageID := strings.TrimSpace(out)
	if r := docker(t, "run", "--rm", tag); r != (result{Stdout: "x\n"}) {
		t.Errorf("run of the committed image = %+v", r)
	}
	want := result{Stdout: "1\nhi\nchanged\n", Stderr: "ls: /bin/ls: No such file or directory\n"}
	if r := docker(t, "run", "--rm", tag, "sh", "-c", "echo $ADDED; ls /bin/ls; cat /tmp/new; tail -n 1 /etc/passwd"); r != want {
		t.Errorf("files of the committed image = %+v, want %+v", r, want)
	}
	if got := mustDocker(t, "inspect", "-f", "{{.Id}}|{{.Author}}|{{.Config.Cmd}}|{{.Config.Env}}|{{len .RootFS.Layers}}", tag); got != imageID+"|me|[cat /data/sub/f]|["+testimages.PathEnv+" ADDED=1]|2\n" {
		t.Errorf("inspect of the committed image = %q", got)
	}
	hist := strings.Split(mustDocker(t, "history", "--no-trunc", "--format", "{{.CreatedBy}}|{{.Comment}}", tag), "\n")
	if len(hist) < 2 || hist[0] != "sleep 1000|a message" {
		t.Errorf("history of the committed image = %q", hist)
	}
	if got := mustDocker(t, "images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}", "e2e-commit"); got != tag+" "+imageID[7:19]+"\n" {
		t.Errorf("images e2e-commit = %q", got)
	}
	// Unpaused, the container goes on running; the commit is untagged.
	if out := mustDocker(t, "commit", "--pause=false", name); !imageIDLine.MatchString(out) {
		t.Errorf("commit --pause=false printed %q", out)
	} else {
		mustDocker(t, "rmi", strings.TrimSpace(out))
	}
	if got := mustDocker(t, "inspect", "-f", "{{.State.Running}}", name); got != "true\n" {
		t.Errorf("running after the commits: %q", got)
	}

	// A stopped container: the same changes, and its filesystem as a tar.
	mustDocker(t, "stop", "-t", "1", name)
	if got := sortedLines(mustDocker(t, "diff", name)); got != sortedLines(wantDiff) {
		t.Errorf("diff of the stopped container = %q", got)
	}
	cmd := exec.Command(suite.DockerCLI, "export", name)
	cmd.Env = dockerEnv()
	tarOut, err := cmd.Output()
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	names := exportNames(t, tarOut)
	for _, n := range []string{"bin/", "bin/busybox", "data/sub/f", "tmp/new", "etc/passwd"} {
		if !slices.Contains(names, n) {
			t.Errorf("export lacks %s (%d entries)", n, len(names))
		}
	}
	if slices.Contains(names, "bin/ls") || slices.Contains(names, "./") {
		t.Errorf("export has bin/ls or ./ (%d entries)", len(names))
	}

	// Committing a container without changes adds no layer.
	mustDocker(t, "create", "--name", clean, img, "true")
	if r := docker(t, "diff", clean); r != (result{}) {
		t.Errorf("diff of a created container = %+v", r)
	}
	emptyID := strings.TrimSpace(mustDocker(t, "commit", clean, emptyTag))
	if got := mustDocker(t, "history", "--format", "{{.CreatedBy}}|{{.Size}}", emptyTag); !strings.HasPrefix(got, "true|0B\n") {
		t.Errorf("history of an empty commit = %q", got)
	}
	if got := mustDocker(t, "inspect", "-f", "{{len .RootFS.Layers}}", emptyTag); got != "1\n" {
		t.Errorf("layers of an empty commit = %q", got)
	}

	// Events: commit names the image made, export the container.
	format := `{{.Type}} {{.Action}} {{.Actor.ID}} {{.Actor.Attributes.name}} {{.Actor.Attributes.comment}}|{{.Actor.Attributes.imageID}}|{{.Actor.Attributes.imageRef}}`
	evOut := mustDocker(t, "events", "--since", since, "--until", fmt.Sprint(time.Now().Unix()+1), "--format", format,
		"--filter", "event=commit", "--filter", "event=export", "--filter", "container="+id)
	wantEv := []string{
		"container commit " + id + " " + name + " a message|" + imageID + "|" + tag,
		"container export " + id + " " + name + " <no value>|<no value>|<no value>",
	}
	gotEv := strings.Split(strings.TrimSpace(evOut), "\n")
	// The untagged commit sits between them.
	if len(gotEv) != 3 || gotEv[0] != wantEv[0] || gotEv[2] != wantEv[1] || !strings.HasPrefix(gotEv[1], "container commit "+id+" "+name+" |sha256:") {
		t.Errorf("events:\n%s\nwant:\n%s", evOut, strings.Join(wantEv, "\n"))
	}
	mustDocker(t, "rm", name, clean)
	mustDocker(t, "rmi", tag, emptyID)
}

// exportNames lists the entries of a tar.
func exportNames(t *testing.T, b []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatalf("bad tar: %v", err)
		}
		names = append(names, hdr.Name)
	}
}
