package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
)

// TestBuildCancel: a build the client named with a build ID stops when
// the client cancels that ID (the Go SDK's BuildCancel), and leaves no
// image and no build VM behind. dockerd cancels only BuildKit builds so; its classic
// builder ignores the ID.
func TestBuildCancel(t *testing.T) {
	requireSuite(t)
	if suite.Kind == harness.Dockerd {
		t.Skip("dockerd's classic builder ignores a build ID; only BuildKit builds can be cancelled by one")
	}
	img := pulled(t, testimages.Busybox)
	c := goClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dockerfile := "FROM " + img + "\nRUN echo started; sleep 600\n"
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(dockerfile)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	tag := namePrefix(t) + ":never"
	id := namePrefix(t) + "-build"
	res, err := c.ImageBuild(ctx, &buf, client.ImageBuildOptions{Tags: []string{tag}, BuildID: id, Remove: true})
	if err != nil {
		t.Fatalf("ImageBuild: %v", err)
	}
	defer res.Body.Close()
	out := bufio.NewScanner(res.Body)
	var seen strings.Builder
	for !strings.Contains(seen.String(), `started\n`) {
		if !out.Scan() {
			t.Fatalf("the build ended before its RUN started: %s", seen.String())
		}
		seen.WriteString(out.Text())
	}
	socks, err := filepath.Glob(filepath.Join(suite.DaemonRoot, "builds", "vms", "*", "vm", "qmp.sock"))
	if err != nil || len(socks) != 1 {
		t.Fatalf("want one build VM, found %q (%v)", socks, err)
	}
	vm := filepath.Dir(filepath.Dir(socks[0]))
	short := filepath.Base(vm)[:12]
	if _, err := c.BuildCancel(ctx, id, client.BuildCancelOptions{}); err != nil {
		t.Fatalf("BuildCancel: %v", err)
	}
	var rest strings.Builder
	for out.Scan() {
		rest.WriteString(out.Text())
	}
	if !strings.Contains(rest.String(), `"error":"context canceled"`) {
		t.Errorf("after the cancel the build said %s, want it to end with the cancel as its error", rest.String())
	}
	if r := docker(t, "image", "inspect", tag); r.Code == 0 {
		t.Errorf("the cancelled build left %s", tag)
	}
	eventually(t, "the cancelled build's VM gone", func() string {
		if ps, err := harness.ProcessesMentioning("process=husk-" + short); err != nil || len(ps) != 0 {
			return "a QEMU of build VM " + short + " still runs"
		}
		if _, err := os.Stat(vm); !os.IsNotExist(err) {
			return "build VM " + short + "'s directory is still there"
		}
		return ""
	})
}
