package apicompat

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
)

// fakeStats counts samples: the Nth has N seconds of CPU time.
type fakeStats struct {
	mu      sync.Mutex
	n       uint64
	running bool
}

func (f *fakeStats) Stats(_ context.Context, ref string) (container.StatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := container.StatsResponse{ID: "id-" + ref, Name: "/" + ref}
	if ref == "missing" {
		return container.StatsResponse{}, errdefs.ErrNotFound.WithMessage("No such container: missing")
	}
	if !f.running {
		return resp, errdefs.ErrConflict.WithMessage("not running")
	}
	f.n++
	resp.Read = time.Unix(int64(f.n), 0).UTC()
	resp.CPUStats.CPUUsage.TotalUsage = f.n * uint64(time.Second)
	return resp, nil
}

func statsServer(t *testing.T, f *fakeStats) *httptest.Server {
	h := New(Config{Stats: f})
	h.(*server).statsInterval = time.Millisecond
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestStatsNoStream(t *testing.T) {
	for _, tt := range []struct {
		query            string
		running          bool
		wantCPU, wantPre uint64
		wantName         string
	}{
		// stream=false waits for a second sample, so that precpu is set.
		{"stream=false", true, 2, 1, "/web"},
		// one-shot: the first sample alone.
		{"stream=false&one-shot=true", true, 1, 0, "/web"},
		// a stopped container: an empty sample that names it.
		{"stream=false", false, 0, 0, "/web"},
	} {
		srv := statsServer(t, &fakeStats{running: tt.running})
		resp, err := srv.Client().Get(srv.URL + "/v1.50/containers/web/stats?" + tt.query)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got container.StatsResponse
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v in %s", tt.query, err, b)
		}
		if resp.StatusCode != http.StatusOK || got.Name != tt.wantName || got.ID != "id-web" ||
			got.CPUStats.CPUUsage.TotalUsage != tt.wantCPU*uint64(time.Second) || got.PreCPUStats.CPUUsage.TotalUsage != tt.wantPre*uint64(time.Second) {
			t.Errorf("%s (running %v): %d %s", tt.query, tt.running, resp.StatusCode, b)
		}
	}
	srv := statsServer(t, &fakeStats{running: true})
	resp, err := srv.Client().Get(srv.URL + "/containers/missing/stats?stream=0")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("missing container: %d", resp.StatusCode)
	}
}

func TestStatsStream(t *testing.T) {
	srv := statsServer(t, &fakeStats{running: true})
	resp, err := srv.Client().Get(srv.URL + "/containers/web/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var prev *container.StatsResponse
	for i := range 3 {
		if !sc.Scan() {
			t.Fatalf("stream ended after %d samples: %v", i, sc.Err())
		}
		var got container.StatsResponse
		if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if prev != nil && (got.PreCPUStats.CPUUsage.TotalUsage != prev.CPUStats.CPUUsage.TotalUsage || !got.PreRead.Equal(prev.Read)) {
			t.Errorf("sample %d: precpu %+v, want the previous sample's %+v", i, got.PreCPUStats, prev.CPUStats)
		}
		if got.CPUStats.CPUUsage.TotalUsage != uint64(i+1)*uint64(time.Second) {
			t.Errorf("sample %d: cpu %d", i, got.CPUStats.CPUUsage.TotalUsage)
		}
		prev = &got
	}
}
