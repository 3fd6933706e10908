package containers

import (
	"testing"

	"github.com/moby/moby/api/types/container"
)

func TestExtractAllowed(t *testing.T) {
	mounts := []container.MountPoint{
		{Destination: "/data", RW: false},
		{Destination: "/data/rw", RW: true},
		{Destination: "/cache", RW: true},
	}
	for _, tc := range []struct {
		name         string
		readonlyRoot bool
		dir, want    string
	}{
		{"writable root", false, "/tmp", ""},
		{"read-only root", true, "/tmp", "container rootfs is marked read-only"},
		{"read-only root, relative path", true, "tmp/../etc", "container rootfs is marked read-only"},
		{"writable volume on a read-only root", true, "/cache/sub", ""},
		{"the volume itself", true, "/cache", ""},
		{"a sibling sharing a prefix", true, "/cachex", "container rootfs is marked read-only"},
		{"read-only volume on a writable root", false, "/data/x", "mounted volume is marked read-only"},
		{"writable volume inside a read-only one", false, "/data/rw/x", ""},
		{"out of a volume by ..", true, "/cache/../x", "container rootfs is marked read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := extractAllowed(tc.readonlyRoot, mounts, tc.dir)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("extractAllowed(%v, %q) = %q, want %q", tc.readonlyRoot, tc.dir, got, tc.want)
			}
		})
	}
}
