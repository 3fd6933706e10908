package apicompat

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/moby/moby/api/types/container"
)

// ctxRecorder is a container backend that notes, per call, whether the
// context it was given had been cancelled.
type ctxRecorder struct {
	*fakeContainers
	mu        sync.Mutex
	cancelled map[string]bool
}

func (c *ctxRecorder) note(op string, ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelled[op] = ctx.Err() != nil
}

func (c *ctxRecorder) Create(ctx context.Context, req CreateRequest) (container.CreateResponse, error) {
	c.note("create", ctx)
	return c.fakeContainers.Create(ctx, req)
}

func (c *ctxRecorder) Start(ctx context.Context, ref string) error {
	c.note("start", ctx)
	return c.fakeContainers.Start(ctx, ref)
}

func (c *ctxRecorder) Stop(ctx context.Context, ref, signal string, timeout *int) error {
	c.note("stop", ctx)
	return c.fakeContainers.Stop(ctx, ref, signal, timeout)
}

func (c *ctxRecorder) Kill(ctx context.Context, ref, signal string) error {
	c.note("kill", ctx)
	return c.fakeContainers.Kill(ctx, ref, signal)
}

func (c *ctxRecorder) Remove(ctx context.Context, ref string, opts RemoveOptions) error {
	c.note("remove", ctx)
	return c.fakeContainers.Remove(ctx, ref, opts)
}

func (c *ctxRecorder) Wait(ctx context.Context, ref string, cond container.WaitCondition) (<-chan container.WaitResponse, error) {
	c.note("wait", ctx)
	return c.fakeContainers.Wait(ctx, ref, cond)
}

// TestChangesOutliveTheirClient: a request to change a container's state
// is carried out with a context its client's going away does not cancel,
// as dockerd carries it out (an interrupted `docker stop` still stops the
// container), while a stream's context ends with its client.
func TestChangesOutliveTheirClient(t *testing.T) {
	rec := &ctxRecorder{fakeContainers: newFakeContainers(), cancelled: map[string]bool{}}
	srv := New(Config{Images: &fakeImages{}, Containers: rec, System: fakeSystem{}, Version: "0.1.0", Logger: slog.New(slog.DiscardHandler)})
	// Each request's client is gone before the daemon reads it: its
	// context is cancelled from the start.
	gone := func(method, path, body string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		t.Logf("%s %s: %d %s", method, path, w.Code, w.Body.String())
	}
	steps := []struct {
		method, path, body string
		op                 string
		outlives           bool
	}{
		{http.MethodPost, "/v1.50/containers/create?name=web", `{"Image":"alpine"}`, "create", true},
		{http.MethodPost, "/v1.50/containers/web/start", "", "start", true},
		{http.MethodPost, "/v1.50/containers/web/kill?signal=HUP", "", "kill", true},
		{http.MethodPost, "/v1.50/containers/web/stop?t=1", "", "stop", true},
		{http.MethodPost, "/v1.50/containers/web/wait", "", "wait", false},
		{http.MethodDelete, "/v1.50/containers/web?force=1", "", "remove", true},
	}
	for _, s := range steps {
		gone(s.method, s.path, s.body)
		rec.mu.Lock()
		cancelled, called := rec.cancelled[s.op]
		rec.mu.Unlock()
		switch {
		case !called:
			t.Errorf("%s %s: the backend's %s was not called", s.method, s.path, s.op)
		case cancelled == s.outlives:
			t.Errorf("%s %s: %s's context cancelled %v with its client gone, want %v", s.method, s.path, s.op, cancelled, !s.outlives)
		}
	}
}
