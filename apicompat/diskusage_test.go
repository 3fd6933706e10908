package apicompat

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/volume"
)

// duImages is fakeImages that also answers the image part of /system/df.
type duImages struct{ fakeImages }

func (*duImages) DiskUsage(context.Context) (int64, []image.Summary, error) {
	return 300, []image.Summary{{ID: "sha256:i1", Size: 200, SharedSize: 100, Containers: 1}}, nil
}

// duContainers is fakeContainers with sizes.
type duContainers struct{ *fakeContainers }

func (duContainers) Size(_ context.Context, ref string) (int64, int64, error) { return 6, 206, nil }

func (c duContainers) List(ctx context.Context, opts ContainerListOptions) ([]container.Summary, error) {
	list, err := c.fakeContainers.List(ctx, opts)
	if opts.Size {
		for i := range list {
			list[i].SizeRw, list[i].SizeRootFs = 6, 206
		}
	}
	return list, err
}

type duVolumes struct{ Volumes }

func (duVolumes) DiskUsage(context.Context) ([]volume.Volume, error) {
	return []volume.Volume{{Name: "v", UsageData: &volume.UsageData{Size: 4, RefCount: 1}}}, nil
}

func TestDiskUsageAndBuildPrune(t *testing.T) {
	ctrs := duContainers{newFakeContainers()}
	srv := httptest.NewServer(New(Config{Images: &duImages{}, Containers: ctrs, Volumes: duVolumes{}, System: fakeSystem{}}))
	t.Cleanup(srv.Close)
	env := &testEnv{srv: srv, ctrs: ctrs.fakeContainers}
	env.create(t, "web", container.Config{Image: "alpine"})

	type du struct {
		LayersSize int64
		Images     []image.Summary
		Containers []container.Summary
		Volumes    []volume.Volume
		BuildCache []json.RawMessage
	}
	for _, tt := range []struct {
		path                               string
		images, containers, volumes, cache bool
	}{
		{"/v1.50/system/df", true, true, true, true},
		{"/v1.50/system/df?type=container", false, true, false, false},
		{"/v1.50/system/df?type=volume&type=build-cache", false, false, true, true},
		// Before 1.42 the type is ignored.
		{"/v1.41/system/df?type=container", true, true, true, true},
	} {
		r := env.do(t, "GET", tt.path, "", nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", tt.path, r.status, r.body)
		}
		var got du
		if err := json.Unmarshal([]byte(r.body), &got); err != nil {
			t.Fatal(err)
		}
		if (got.Images != nil) != tt.images || (got.Containers != nil) != tt.containers ||
			(got.Volumes != nil) != tt.volumes || (got.BuildCache != nil) != tt.cache {
			t.Errorf("%s: sections present %v %v %v %v in %s", tt.path, got.Images != nil, got.Containers != nil, got.Volumes != nil, got.BuildCache != nil, r.body)
		}
		if tt.images && (got.LayersSize != 300 || got.Images[0].SharedSize != 100 || got.Images[0].Containers != 1) {
			t.Errorf("%s: images %+v, layers %d", tt.path, got.Images, got.LayersSize)
		}
		if tt.containers && (len(got.Containers) != 1 || got.Containers[0].SizeRw != 6 || got.Containers[0].SizeRootFs != 206) {
			t.Errorf("%s: containers %+v", tt.path, got.Containers)
		}
		if tt.volumes && (len(got.Volumes) != 1 || got.Volumes[0].UsageData == nil || got.Volumes[0].UsageData.RefCount != 1) {
			t.Errorf("%s: volumes %+v", tt.path, got.Volumes)
		}
		if tt.cache && len(got.BuildCache) != 0 {
			t.Errorf("%s: build cache %s", tt.path, got.BuildCache)
		}
	}

	for _, tt := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/v1.50/system/df?type=bogus", 400, jsonError("unknown object type: bogus")},
		{"POST", "/v1.50/build/prune", 200, `{"CachesDeleted":null,"SpaceReclaimed":0}` + "\n"},
		{"POST", `/v1.50/build/prune?all=1&filters={"label":["a=b"],"until":["10m"]}`, 200, `{"CachesDeleted":null,"SpaceReclaimed":0}` + "\n"},
		{"POST", `/v1.50/build/prune?filters={"bogus":["1"]}`, 400, jsonError("failed to prune build cache: invalid filter 'bogus'")},
		{"POST", `/v1.50/build/prune?filters={"mutable":["1"]}`, 400, jsonError("failed to prune build cache: invalid filter 'mutable'")},
		{"POST", `/v1.50/build/prune?filters={"until":["1h"],"unused-for":["2h"]}`, 400, jsonError(`failed to prune build cache: conflicting filters: "until" and "unused-for"`)},
		{"POST", `/v1.50/build/prune?filters={"id":["a","b"]}`, 400, jsonError("failed to prune build cache: filters expect only one value")},
		{"POST", `/v1.50/build/prune?filters={"until":["1h","2h"]}`, 400, jsonError("failed to prune build cache: filters expect only one value")},
		{"POST", `/v1.50/build/prune?filters={"unused-for":["bogus"],"id":["a","b"]}`, 400,
			jsonError(`failed to prune build cache: "unused-for" filter expects a duration (e.g., '24h') or a timestamp: failed to parse value as time or duration: "bogus"`)},
		{"GET", "/v1.50/containers/web/json?size=1", 200, ""},
	} {
		r := env.do(t, tt.method, tt.path, "", nil)
		if r.status != tt.status || (tt.body != "" && r.body != tt.body) {
			t.Errorf("%s %s = %d %q, want %d %q", tt.method, tt.path, r.status, r.body, tt.status, tt.body)
		}
	}
	var insp container.InspectResponse
	r := env.do(t, "GET", "/v1.50/containers/web/json?size=1", "", nil)
	if err := json.Unmarshal([]byte(r.body), &insp); err != nil {
		t.Fatal(err)
	}
	if insp.SizeRw == nil || *insp.SizeRw != 6 || insp.SizeRootFs == nil || *insp.SizeRootFs != 206 {
		t.Errorf("inspect ?size=1: SizeRw %v SizeRootFs %v", insp.SizeRw, insp.SizeRootFs)
	}
	r = env.do(t, "GET", "/v1.50/containers/web/json", "", nil)
	insp = container.InspectResponse{}
	if err := json.Unmarshal([]byte(r.body), &insp); err != nil {
		t.Fatal(err)
	}
	if insp.SizeRw != nil || insp.SizeRootFs != nil {
		t.Errorf("inspect without size: SizeRw %v SizeRootFs %v", insp.SizeRw, insp.SizeRootFs)
	}
}
