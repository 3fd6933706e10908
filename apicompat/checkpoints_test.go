package apicompat

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/checkpoint"
	"github.com/moby/moby/api/types/container"
)

// fakeCheckpoints records the calls it gets and answers from a map of
// names per container.
type fakeCheckpoints struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeCheckpoints) record(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
}

func (f *fakeCheckpoints) CheckpointCreate(_ context.Context, ref string, req checkpoint.CreateRequest) error {
	f.record("create %s %s %s %v", ref, req.CheckpointID, req.CheckpointDir, req.Exit)
	if req.CheckpointID == "dup" {
		return errdefs.ErrUnknown.WithMessage("cannot checkpoint container " + ref + ": checkpoint with name dup already exists for container " + ref)
	}
	return nil
}

func (f *fakeCheckpoints) CheckpointList(_ context.Context, ref, dir string) ([]checkpoint.Summary, error) {
	f.record("list %s %s", ref, dir)
	if dir == "" {
		return nil, nil
	}
	return []checkpoint.Summary{{Name: "cp1"}}, nil
}

func (f *fakeCheckpoints) CheckpointDelete(_ context.Context, ref, name, dir string) error {
	f.record("delete %s %s %s", ref, name, dir)
	return nil
}

func (f *fakeCheckpoints) StartCheckpoint(_ context.Context, ref, name, dir string) error {
	f.record("start %s %s %s", ref, name, dir)
	return nil
}

func (f *fakeCheckpoints) Fork(_ context.Context, ref, name, dir string, n int) ([]ForkedContainer, error) {
	f.record("fork %s %s %s %d", ref, name, dir, n)
	return []ForkedContainer{{ID: "abc", Name: "fork_1"}}, nil
}

func TestCheckpointRoutes(t *testing.T) {
	ctrs := newFakeContainers()
	cp := &fakeCheckpoints{}
	srv := httptest.NewServer(New(Config{Images: &fakeImages{}, Containers: ctrs, System: fakeSystem{}, Checkpoints: cp, Forker: cp}))
	t.Cleanup(srv.Close)
	env := &testEnv{srv: srv, ctrs: ctrs}
	jsonHdr := http.Header{"Content-Type": {"application/json"}}

	cases := []struct {
		method, path, body string
		status             int
		call               string
		respBody           string
	}{
		{"POST", "/v1.50/containers/c1/checkpoints", `{"CheckpointID":"cp1","Exit":true}`, 201, "create c1 cp1  true", ""},
		{"POST", "/v1.50/containers/c1/checkpoints", `{"CheckpointID":"dup"}`, 500, "create c1 dup  false", "already exists"},
		{"GET", "/v1.50/containers/c1/checkpoints", "", 200, "list c1 ", "[]"},
		{"GET", "/v1.50/containers/c1/checkpoints?dir=/d", "", 200, "list c1 /d", `[{"Name":"cp1"}]`},
		// Not the container removal route, which also ends in a name.
		{"DELETE", "/v1.50/containers/c1/checkpoints/cp1?dir=/d", "", 204, "delete c1 cp1 /d", ""},
		{"POST", "/v1.50/containers/c1/start?checkpoint=cp1&checkpoint-dir=/d", "", 204, "start c1 cp1 /d", ""},
		{"POST", "/v1.50/husk/containers/c1/fork?checkpoint=cp1&count=3", "", 201, "fork c1 cp1  3", `[{"Id":"abc","Name":"fork_1"}]`},
		{"POST", "/v1.50/husk/containers/c1/fork?count=3", "", 400, "", "checkpoint is required"},
	}
	for _, tc := range cases {
		cp.calls = nil
		var hdr http.Header
		if tc.body != "" {
			hdr = jsonHdr
		}
		r := env.do(t, tc.method, tc.path, tc.body, hdr)
		if r.status != tc.status {
			t.Errorf("%s %s: status %d, want %d (%s)", tc.method, tc.path, r.status, tc.status, r.body)
		}
		if tc.respBody != "" && !strings.Contains(r.body, tc.respBody) {
			t.Errorf("%s %s: body %q, want %q in it", tc.method, tc.path, r.body, tc.respBody)
		}
		var got string
		if len(cp.calls) > 0 {
			got = cp.calls[0]
		}
		if got != tc.call {
			t.Errorf("%s %s: backend call %q, want %q", tc.method, tc.path, got, tc.call)
		}
	}

	// A plain start still goes to the container backend.
	id := env.create(t, "plain", container.Config{Image: "alpine"})
	if r := env.do(t, "POST", "/v1.50/containers/"+id+"/start", "", nil); r.status != 204 {
		t.Errorf("plain start: %d %s", r.status, r.body)
	}

	// Without a checkpoint backend the routes say so.
	bare := httptest.NewServer(New(Config{Images: &fakeImages{}, Containers: ctrs, System: fakeSystem{}}))
	t.Cleanup(bare.Close)
	resp, err := bare.Client().Get(bare.URL + "/v1.50/containers/c1/checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("list without backend: %d, want 501", resp.StatusCode)
	}
}
