package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
	"github.com/husk-vm/husk/runtime/containers"
)

// imageTemplatesReady counts huskd's lines saying that an image template
// of img is ready (at Info, so also in a quiet daemon's log).
func imageTemplatesReady(t *testing.T, img string) int {
	t.Helper()
	return logCount(t, `msg="image template ready"`, imageHex(t, img))
}

// imageHex is img's ID without its "sha256:", as huskd's log names an
// image template's base.
func imageHex(t *testing.T, img string) string {
	t.Helper()
	return strings.TrimPrefix(strings.TrimSpace(mustDocker(t, "image", "inspect", "--format", "{{.Id}}", img)), "sha256:")
}

// waitImageTemplate waits until huskd has said more than since times that
// an image template of img is ready. A fresh container's first start from
// its shape's template has huskd build its image's template in the
// background, so it starts one first when none is ready.
func waitImageTemplate(t *testing.T, img string, since int) {
	t.Helper()
	if imageTemplatesReady(t, img) > since {
		return
	}
	mustDocker(t, "run", "--rm", img, "true")
	eventually(t, "the image template of "+img+" is ready", func() string {
		if imageTemplatesReady(t, img) <= since {
			return "no new \"image template ready\" line for " + img + " in " + suite.DaemonLog
		}
		return ""
	})
}

// restoredFrom reports whether the daemon log says the container id's VM
// was restored from a template of kind ("image" or "shape").
func restoredFrom(t *testing.T, id, kind string) bool {
	return daemonLogHas(t, "container VM restored from a template", "id="+id[:12], "template="+kind)
}

// TestImageTemplate: once an image's template is ready, containers of
// the image start from it (the daemon log says so) with their own
// identity, each with a writable layer of its own: one's writes are not
// another's, `docker diff` and `docker commit` see them, and the
// container starts again with them after it exits. A container whose
// upper disk was written before its first start (docker cp), or that asks
// for its shape's template, does not start from the image template. A
// container started from one checkpoints and restores.
func TestImageTemplate(t *testing.T) {
	requireBridge(t)
	img := pulled(t, testimages.Busybox)
	waitTemplate(t)
	waitImageTemplate(t, img, 0)
	inspectID := func(name string) string {
		return strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", name))
	}

	for name, id := range runTwoAtOnce(t, img) {
		if !restoredFrom(t, id, "image") {
			t.Errorf("%s (%s) was not started from the image template", name, id[:12])
		}
	}

	writer, reader := containerName(t, "-w"), containerName(t, "-r")
	if out := mustDocker(t, "run", "--name", writer, img, "sh", "-c", "echo mine > /own && cat /own"); out != "mine\n" {
		t.Fatalf("writer: %q", out)
	}
	if out := mustDocker(t, "run", "--name", reader, img, "sh", "-c", "cat /own 2>&1; echo rc=$?"); !strings.Contains(out, "rc=1") {
		t.Errorf("a second container of the image sees the first's file: %q", out)
	}
	for _, n := range []string{writer, reader} {
		if !restoredFrom(t, inspectID(n), "image") {
			t.Errorf("%s was not started from the image template", n)
		}
	}
	if r := docker(t, "diff", writer); r.Code != 0 || !strings.Contains(r.Stdout, "A /own") {
		t.Errorf("docker diff %s: exit %d, %q, want A /own", writer, r.Code, r.Stdout)
	}
	if r := docker(t, "diff", reader); r.Code != 0 || strings.Contains(r.Stdout, "/own") {
		t.Errorf("docker diff %s: exit %d, %q, want no /own", reader, r.Code, r.Stdout)
	}
	// It starts again, on its own writable layer, now from its shape's
	// template: the disk is no longer fresh.
	if out := mustDocker(t, "start", "-a", writer); out != "mine\n" {
		t.Errorf("second start of %s printed %q, want its own file", writer, out)
	}
	committed := "e2e-image-template-commit:1"
	mustDocker(t, "commit", writer, committed)
	t.Cleanup(func() { docker(t, "rmi", "-f", committed) })
	if out := mustDocker(t, "run", "--rm", committed, "cat", "/own"); out != "mine\n" {
		t.Errorf("the committed image has /own = %q", out)
	}

	// Written before its first start: not fresh.
	copied := containerName(t, "-cp")
	mustDocker(t, "create", "--name", copied, img, "cat", "/copied")
	src := filepath.Join(t.TempDir(), "copied")
	if err := os.WriteFile(src, []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustDocker(t, "cp", src, copied+":/copied")
	// The VM docker cp booted may have come from the image template; the
	// start's must not.
	fromImage := func() int {
		return logCount(t, "container VM restored from a template", "id="+inspectID(copied)[:12], "template=image")
	}
	before := fromImage()
	if out := mustDocker(t, "start", "-a", copied); out != "from the host\n" {
		t.Errorf("a container given a file by docker cp before its start printed %q", out)
	}
	if fromImage() != before {
		t.Errorf("%s, written by docker cp before its start, started from the image template", copied)
	}

	shape := containerName(t, "-shape")
	mustDocker(t, "run", "--name", shape, "--label", containers.BootLabel+"=shape", img, "true")
	if !restoredFrom(t, inspectID(shape), "shape") {
		t.Errorf("%s, labelled %s=shape, was not started from its shape's template", shape, containers.BootLabel)
	}

	long := containerName(t, "-ck")
	mustDocker(t, "run", "-d", "--name", long, img, "sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.2; done")
	if !restoredFrom(t, inspectID(long), "image") {
		t.Fatalf("%s was not started from the image template", long)
	}
	mustDocker(t, "checkpoint", "create", long, "cp")
	mustDocker(t, "start", "--checkpoint", "cp", long)
	if out := mustDocker(t, "exec", long, "cat", "/tmp/n"); strings.TrimSpace(out) == "" {
		t.Errorf("after the restore, /tmp/n is empty")
	}
	mustDocker(t, "rm", "-f", long)
}
