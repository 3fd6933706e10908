package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/husk-vm/husk/e2e/testimages"
)

// goClient is the Go SDK, negotiating its API version, on the suite's
// daemon.
func goClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.WithHost(suite.DockerHost), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestGoClient drives the daemon with the Go SDK, github.com/moby/moby/client,
// unmodified and with API version negotiation, over the same ground as the
// docker-py and dockerode tests.
func TestGoClient(t *testing.T) {
	requireSuite(t)
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	c := goClient(t)

	// ImagePull, waited for through the JSON message stream.
	img := ref(testimages.Busybox)
	pull, err := c.ImagePull(ctx, img, client.ImagePullOptions{})
	if err != nil {
		t.Fatalf("ImagePull %s: %v", img, err)
	}
	if err := pull.Wait(ctx); err != nil {
		t.Fatalf("ImagePull %s: %v", img, err)
	}
	if _, err := c.ImageInspect(ctx, img); err != nil {
		t.Fatalf("ImageInspect after pull: %v", err)
	}

	prefix := namePrefix(t)
	for _, suffix := range []string{"-run", "-main"} {
		containerName(t, suffix)
	}

	// Create, start, wait for a failing container; its logs demultiplexed.
	created, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:   prefix + "-run",
		Config: &container.Config{Image: img, Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, Labels: map[string]string{"e2e": "goclient"}},
	})
	if err != nil {
		t.Fatalf("ContainerCreate: %v", err)
	}
	wait := c.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := c.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("ContainerStart: %v", err)
	}
	select {
	case res := <-wait.Result:
		if res.StatusCode != 3 || res.Error != nil {
			t.Errorf("ContainerWait = %+v, want status 3", res)
		}
	case err := <-wait.Error:
		t.Fatalf("ContainerWait: %v", err)
	}
	logs, err := c.ContainerLogs(ctx, created.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("ContainerLogs: %v", err)
	}
	var stdout, stderr bytes.Buffer
	_, err = stdcopy.StdCopy(&stdout, &stderr, logs)
	logs.Close()
	if err != nil || stdout.String() != "out\n" || stderr.String() != "err\n" {
		t.Errorf("logs: stdout %q, stderr %q, err %v; want \"out\\n\", \"err\\n\"", stdout.String(), stderr.String(), err)
	}

	// Exec: create, attach, inspect.
	main, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:   prefix + "-main",
		Config: &container.Config{Image: img, Cmd: []string{"sleep", "1000"}, Labels: map[string]string{"e2e": "goclient"}},
	})
	if err != nil {
		t.Fatalf("ContainerCreate: %v", err)
	}
	if _, err := c.ContainerStart(ctx, main.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("ContainerStart: %v", err)
	}
	ex, err := c.ExecCreate(ctx, main.ID, client.ExecCreateOptions{
		Cmd: []string{"sh", "-c", "echo $A; pwd; id -u; echo e >&2; exit 4"}, Env: []string{"A=b"},
		WorkingDir: "/tmp", User: "1234", AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		t.Fatalf("ExecCreate: %v", err)
	}
	att, err := c.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("ExecAttach: %v", err)
	}
	stdout.Reset()
	stderr.Reset()
	_, err = stdcopy.StdCopy(&stdout, &stderr, att.Reader)
	att.Close()
	if err != nil || stdout.String() != "b\n/tmp\n1234\n" || stderr.String() != "e\n" {
		t.Errorf("exec output: stdout %q, stderr %q, err %v", stdout.String(), stderr.String(), err)
	}
	// The stream ends when the process does, but the exit code may be
	// recorded a moment later: poll rather than assume.
	eventually(t, "exec inspect reports the exit", func() string {
		ins, err := c.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		switch {
		case err != nil:
			t.Fatalf("ExecInspect: %v", err)
		case ins.Running:
			return "still running"
		case ins.ExitCode != 4 || ins.ContainerID != main.ID:
			t.Fatalf("ExecInspect = %+v, want exit 4 in %s", ins, main.ID)
		}
		return ""
	})

	// CopyToContainer and back.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	payload := "payload\n"
	if err := tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: int64(len(payload)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(tw, payload); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CopyToContainer(ctx, main.ID, client.CopyToContainerOptions{DestinationPath: "/tmp", Content: &tb}); err != nil {
		t.Fatalf("CopyToContainer: %v", err)
	}
	cp, err := c.CopyFromContainer(ctx, main.ID, client.CopyFromContainerOptions{SourcePath: "/tmp/f"})
	if err != nil {
		t.Fatalf("CopyFromContainer: %v", err)
	}
	if cp.Stat.Name != "f" || cp.Stat.Size != int64(len(payload)) || !cp.Stat.Mode.IsRegular() {
		t.Errorf("CopyFromContainer stat = %+v", cp.Stat)
	}
	tr := tar.NewReader(cp.Content)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatalf("CopyFromContainer: read tar: %v", err)
	}
	got, err := io.ReadAll(tr)
	cp.Content.Close()
	if err != nil || hdr.Name != "f" || string(got) != payload {
		t.Errorf("CopyFromContainer: %q = %q (%v), want f = %q", hdr.Name, got, err, payload)
	}
	if _, err := c.CopyFromContainer(ctx, main.ID, client.CopyFromContainerOptions{SourcePath: "/nope"}); !cerrdefs.IsNotFound(err) {
		t.Errorf("CopyFromContainer /nope: %v, want a NotFound error", err)
	}

	// NotFound on an unknown container, through errdefs.
	for what, call := range map[string]func() error{
		"ContainerInspect": func() error {
			_, err := c.ContainerInspect(ctx, "nope", client.ContainerInspectOptions{})
			return err
		},
		"ContainerRemove": func() error {
			_, err := c.ContainerRemove(ctx, "nope", client.ContainerRemoveOptions{})
			return err
		},
		"ExecCreate": func() error {
			_, err := c.ExecCreate(ctx, "nope", client.ExecCreateOptions{Cmd: []string{"true"}})
			return err
		},
	} {
		err := call()
		if !cerrdefs.IsNotFound(err) || !strings.Contains(err.Error(), "No such container: nope") {
			t.Errorf("%s(nope) = %v, want NotFound \"No such container: nope\"", what, err)
		}
	}

	// ContainerList with filters.
	list := func(all bool, f client.Filters) []string {
		t.Helper()
		res, err := c.ContainerList(ctx, client.ContainerListOptions{All: all, Filters: f})
		if err != nil {
			t.Fatalf("ContainerList %v: %v", f, err)
		}
		var names []string
		for _, s := range res.Items {
			names = append(names, strings.TrimPrefix(s.Names[0], "/"))
		}
		slices.Sort(names)
		return names
	}
	for _, tc := range []struct {
		all  bool
		f    client.Filters
		want []string
	}{
		{true, make(client.Filters).Add("label", "e2e=goclient"), []string{prefix + "-main", prefix + "-run"}},
		{false, make(client.Filters).Add("label", "e2e=goclient"), []string{prefix + "-main"}},
		{true, make(client.Filters).Add("label", "e2e=goclient").Add("status", "exited"), []string{prefix + "-run"}},
		{true, make(client.Filters).Add("name", prefix+"-main"), []string{prefix + "-main"}},
		{true, make(client.Filters).Add("id", created.ID), []string{prefix + "-run"}},
	} {
		if got := list(tc.all, tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("ContainerList(all=%v, %v) = %q, want %q", tc.all, tc.f, got, tc.want)
		}
	}

	for _, id := range []string{created.ID, main.ID} {
		if _, err := c.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil {
			t.Errorf("ContainerRemove %s: %v", id, err)
		}
	}
}
