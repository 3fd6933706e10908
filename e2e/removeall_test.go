package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// removeAll removes a temp dir with a mount still under it, as dockerd
// can leave its netns's bind under its exec root.
func TestRemoveAllDetachesMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := filepath.Join(t.TempDir(), "suite")
	point := filepath.Join(dir, "exec", "netns", "default")
	if err := os.MkdirAll(filepath.Dir(point), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(point, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("/proc/self/ns/net", point, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind a netns: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(point, syscall.MNT_DETACH) })
	if err := removeAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", dir, err)
	}
}
