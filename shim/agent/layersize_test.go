//go:build linux

package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestTreeSize(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a", "b", "f"), make([]byte, 3000), 0o644))
	must(os.Link(filepath.Join(dir, "a", "b", "f"), filepath.Join(dir, "hl")))
	must(os.WriteFile(filepath.Join(dir, "g"), []byte("hello\n"), 0o644))
	must(os.Symlink("/a/b/f", filepath.Join(dir, "sym")))
	got, err := treeSize(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	// The hard link counts once, the symlink its target's length, the
	// directories nothing.
	if want := int64(3000 + 6 + len("/a/b/f")); got != want {
		t.Errorf("treeSize = %d, want %d", got, want)
	}
	if got, err := treeSize(context.Background(), filepath.Join(dir, "missing")); err != nil || got != 0 {
		t.Errorf("treeSize(missing) = %d, %v; want 0, nil", got, err)
	}
}
