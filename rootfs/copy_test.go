package rootfs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
)

func TestCopyDisk(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data"), 3<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dst := filepath.Join(dir, "dst")
	if err := CopyDisk(context.Background(), dst, src); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	want, _ := os.ReadFile(src)
	if !bytes.Equal(got, want) {
		t.Fatal("copy differs from source")
	}
	if used := diskUsage(t, dst); used > 1<<20 {
		t.Errorf("copy of a sparse disk uses %d bytes", used)
	}
	if err := CopyDisk(context.Background(), dst, src); !errdefs.IsAlreadyExists(err) {
		t.Errorf("copy onto an existing file: %v, want already exists", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("directory holds %d entries after the copies, want src and dst", len(entries))
	}
}
