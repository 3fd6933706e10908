package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

// TestImagePrune prunes committed images, dangling and then all unused,
// scoped by a label so that the suite's other images stay; the messages
// and the choice of images are dockerd 20.10's.
func TestImagePrune(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	since := fmt.Sprint(time.Now().Unix())
	mustDocker(t, "run", "--name", name, img, "sh", "-c", "echo a > /a")
	const label = "LABEL e2e.prune=1"
	commit := func(repo string, changes ...string) string {
		args := []string{"commit"}
		for _, c := range changes {
			args = append(args, "-c", c)
		}
		return strings.TrimSpace(mustDocker(t, append(args, name, repo)...))
	}
	// The second commit under the same tag leaves the first dangling.
	dangling := commit("e2e-prune:one", label)
	one := commit("e2e-prune:one", label, "ENV X=2")
	two := commit("e2e-prune:two", label)
	t.Cleanup(func() { docker(t, "rmi", "-f", dangling, one, two) })

	nothing := result{Stdout: "Total reclaimed space: 0B\n"}
	for _, tt := range []struct {
		args []string
		want result
	}{
		{[]string{"--filter", "bogus=1"}, result{Code: 1, Stderr: "Error response from daemon: " + unknownFilter("bogus") + "\n"}},
		{[]string{"--filter", "label=e2e.prune=nope"}, nothing},
		{[]string{"--filter", "label=e2e.prune=1"}, result{Stdout: "Deleted Images:\ndeleted: " + dangling + "\n\nTotal reclaimed space: 0B\n"}},
		{[]string{"--filter", "label=e2e.prune=1"}, nothing},
		// Tagged images go only with -a, and until keeps the new ones.
		{[]string{"-a", "--filter", "label=e2e.prune=1", "--filter", "until=1h"}, nothing},
	} {
		if r := docker(t, append([]string{"image", "prune", "-f"}, tt.args...)...); r != tt.want {
			t.Errorf("image prune %q = %+v, want %+v", tt.args, r, tt.want)
		}
	}

	// -a: both tagged images, then the layer they shared; the base image
	// stays, as a container uses it.
	r := docker(t, "image", "prune", "-f", "-a", "--filter", "label=e2e.prune=1")
	wantLines := sortedLines("untagged: e2e-prune:one\ndeleted: " + one + "\nuntagged: e2e-prune:two\ndeleted: " + two + "\n")
	head, total, found := strings.Cut(r.Stdout, "\n\nTotal reclaimed space: ")
	lines := strings.Split(strings.TrimPrefix(head, "Deleted Images:\n"), "\n")
	var chains, rest []string
	for _, l := range lines {
		if l != "deleted: "+one && l != "deleted: "+two && strings.HasPrefix(l, "deleted: sha256:") {
			chains = append(chains, l)
		} else {
			rest = append(rest, l)
		}
	}
	if r.Code != 0 || !found || !strings.HasPrefix(r.Stdout, "Deleted Images:\n") || len(chains) != 1 ||
		sortedLines(strings.Join(rest, "\n")+"\n") != wantLines || !regexp.MustCompile(`^[1-9][0-9.]*k?B\n$`).MatchString(total) {
		t.Errorf("image prune -a = %+v", r)
	}
	if got := docker(t, "image", "inspect", "-f", "{{.Id}}", one, two); got.Code != 1 {
		t.Errorf("pruned images still there: %+v", got)
	}
	if got := docker(t, "image", "inspect", "-f", "{{.Id}}", img); got.Code != 0 {
		t.Errorf("the image a container uses was pruned: %+v", got)
	}

	// One prune event per prune, with what it reclaimed.
	ev := mustDocker(t, "events", "--since", since, "--until", fmt.Sprint(time.Now().Unix()+1),
		"--filter", "type=image", "--filter", "event=prune", "--format", "{{.Action}} {{.Actor.Attributes.reclaimed}}")
	evs := strings.Split(strings.TrimSpace(ev), "\n")
	if len(evs) != 5 || evs[0] != "prune 0" || evs[4] == "prune 0" || !strings.HasPrefix(evs[4], "prune ") {
		t.Errorf("prune events = %q", evs)
	}
	mustDocker(t, "rm", name)
}
