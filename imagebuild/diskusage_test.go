package imagebuild

import (
	"context"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

func TestDiskUsage(t *testing.T) {
	host := testRegistry(t, nil)
	base := randomImage(t, 1)
	extra, err := random.Layer(2048, "application/vnd.docker.image.rootfs.diff.tar.gzip")
	if err != nil {
		t.Fatal(err)
	}
	child, err := mutate.AppendLayers(base, extra)
	if err != nil {
		t.Fatal(err)
	}
	lone := randomImage(t, 1)
	push(t, host+"/base:1", base)
	push(t, host+"/child:1", child)
	push(t, host+"/lone:1", lone)
	baseID, childID, loneID := configID(t, base), configID(t, child), configID(t, lone)
	s := newService(t, "", func(id string) []string {
		if id == childID {
			return []string{"c1", "c2"}
		}
		return nil
	})
	for _, r := range []string{"base:1", "child:1", "lone:1"} {
		pull(t, s, host+"/"+r)
	}
	ctx := context.Background()
	size := map[string]int64{}
	for _, id := range []string{baseID, childID, loneID} {
		n, err := s.ImageSize(ctx, id)
		if err != nil || n <= 0 {
			t.Fatalf("ImageSize(%s) = %d, %v", id, n, err)
		}
		size[id] = n
	}
	if _, err := s.ImageSize(ctx, "sha256:nope"); err == nil {
		t.Error("ImageSize of a missing image succeeded")
	}

	layers, images, err := s.DiskUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The child's base layer is the base image's only layer: counted once.
	if want := size[childID] + size[loneID]; layers != want {
		t.Errorf("layersSize = %d, want %d", layers, want)
	}
	want := map[string]struct{ shared, containers int64 }{
		baseID:  {size[baseID], 0},
		childID: {size[baseID], 2},
		loneID:  {0, 0},
	}
	if len(images) != len(want) {
		t.Fatalf("DiskUsage listed %d images, want %d", len(images), len(want))
	}
	for _, img := range images {
		w, ok := want[img.ID]
		if !ok {
			t.Errorf("unexpected image %s", img.ID)
			continue
		}
		if img.SharedSize != w.shared || img.Containers != w.containers || img.Size != size[img.ID] {
			t.Errorf("%s: size %d shared %d containers %d; want %d, %d, %d", img.ID, img.Size, img.SharedSize, img.Containers, size[img.ID], w.shared, w.containers)
		}
	}
	// `docker images` shows N/A: dockerd counts containers for the disk
	// usage alone.
	listed, err := s.List(ctx, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range listed {
		if img.Containers != -1 {
			t.Errorf("List: %s has Containers %d, want -1", img.ID, img.Containers)
		}
	}
}
