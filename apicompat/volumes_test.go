package apicompat

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/volume"
)

// fakeVolumes records what the API layer passed on.
type fakeVolumes struct {
	pruneFilters map[string][]string
	removed      []string
	forced       bool
}

func (f *fakeVolumes) Create(_ context.Context, req volume.CreateRequest) (volume.Volume, error) {
	return volume.Volume{Name: req.Name, Driver: "local", Scope: "local"}, nil
}

func (f *fakeVolumes) List(context.Context, map[string][]string) (volume.ListResponse, error) {
	return volume.ListResponse{Volumes: []volume.Volume{}}, nil
}

func (f *fakeVolumes) Inspect(_ context.Context, name string) (volume.Volume, error) {
	return volume.Volume{}, errdefs.ErrNotFound.WithMessage("get " + name + ": no such volume")
}

func (f *fakeVolumes) Remove(_ context.Context, name string, force bool) error {
	f.removed, f.forced = append(f.removed, name), force
	return errdefs.ErrConflict.WithMessage("remove " + name + ": volume is in use - [abc]")
}

func (f *fakeVolumes) Prune(_ context.Context, filters map[string][]string) (volume.PruneReport, error) {
	f.pruneFilters = filters
	return volume.PruneReport{VolumesDeleted: []string{}}, nil
}

func TestVolumeRoutes(t *testing.T) {
	vols := &fakeVolumes{}
	srv := httptest.NewServer(New(Config{Images: &fakeImages{}, Containers: newFakeContainers(), System: fakeSystem{}, Volumes: vols}))
	t.Cleanup(srv.Close)
	env := &testEnv{srv: srv}
	json := http.Header{"Content-Type": {"application/json"}}

	if r := env.do(t, "POST", "/v1.50/volumes/create", `{"Name":"data"}`, json); r.status != http.StatusCreated || !strings.Contains(r.body, `"Name":"data"`) {
		t.Errorf("create: %d %s", r.status, r.body)
	}
	if r := env.do(t, "GET", "/volumes/nope", "", nil); r.status != http.StatusNotFound || !strings.Contains(r.body, "get nope: no such volume") {
		t.Errorf("inspect missing: %d %s", r.status, r.body)
	}
	if r := env.do(t, "DELETE", "/volumes/data?force=1", "", nil); r.status != http.StatusConflict || !vols.forced || !slices.Equal(vols.removed, []string{"data"}) {
		t.Errorf("remove in use: %d %s, force passed %v", r.status, r.body, vols.forced)
	}
	// API 1.42 made prune leave named volumes unless all=true; older
	// clients get the old behaviour.
	env.do(t, "POST", "/v1.50/volumes/prune", "", nil)
	if len(vols.pruneFilters["all"]) != 0 {
		t.Errorf("API 1.50 prune got all=%v", vols.pruneFilters["all"])
	}
	env.do(t, "POST", "/v1.41/volumes/prune", "", nil)
	if !slices.Equal(vols.pruneFilters["all"], []string{"true"}) {
		t.Errorf("API 1.41 prune filters %v, want all=true", vols.pruneFilters)
	}

	none := &testEnv{srv: httptest.NewServer(New(Config{Images: &fakeImages{}, Containers: newFakeContainers(), System: fakeSystem{}}))}
	t.Cleanup(none.srv.Close)
	if r := none.do(t, "GET", "/volumes", "", nil); r.status != http.StatusNotImplemented {
		t.Errorf("without a volume store: %d", r.status)
	}
}
