package volumes

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/moby/api/types/volume"
)

func TestDiskUsage(t *testing.T) {
	ctx := context.Background()
	s, err := New(t.TempDir(), quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	used, err := s.Use(ctx, volume.CreateRequest{Name: "used"}, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Use(ctx, volume.CreateRequest{Name: "used"}, "c2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, volume.CreateRequest{Name: "idle"}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(used.Mountpoint, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(used.Mountpoint, "d", "f"), make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	// A hard link counts once.
	if err := os.Link(filepath.Join(used.Mountpoint, "d", "f"), filepath.Join(used.Mountpoint, "hl")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(used.Mountpoint, "x"), []byte("abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := s.DiskUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]volume.UsageData{"idle": {Size: 0, RefCount: 0}, "used": {Size: 1004, RefCount: 2}}
	if len(got) != len(want) {
		t.Fatalf("DiskUsage = %+v, want %d volumes", got, len(want))
	}
	for _, v := range got {
		if v.UsageData == nil || *v.UsageData != want[v.Name] {
			t.Errorf("%s: UsageData %+v, want %+v", v.Name, v.UsageData, want[v.Name])
		}
	}
}
