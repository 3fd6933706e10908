package kernel

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Digests follow the files: the same until a file changes, then new.
func TestBootDigests(t *testing.T) {
	dir := t.TempDir()
	k, i := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs")
	for _, p := range []string{k, i} {
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b BootDigests
	k1, i1, err := b.Get(k, i)
	if err != nil || k1 == i1 || len(k1) != len("sha256:")+64 {
		t.Fatalf("digests %q %q, %v: want two distinct sha256 digests", k1, i1, err)
	}
	if k2, i2, err := b.Get(k, i); err != nil || k2 != k1 || i2 != i1 {
		t.Errorf("second Get: %q %q %v, want the same digests", k2, i2, err)
	}
	if err := os.WriteFile(k, []byte("another kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(k, later, later); err != nil {
		t.Fatal(err)
	}
	if k3, _, err := b.Get(k, i); err != nil || k3 == k1 {
		t.Errorf("after the kernel changed: %q %v, want a new digest", k3, err)
	}
	if _, _, err := b.Get(filepath.Join(dir, "missing"), i); err == nil {
		t.Error("a missing kernel gave no error")
	}
}
