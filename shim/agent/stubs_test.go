package agent

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

func TestTmpfsStubs(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "var/cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	stubs := mountStubs(root, proto.ProcessSpec{
		Tmpfs: []proto.ProcessTmpfs{{Target: "/var/cache/apt"}, {Target: "root/.cache/pip"}, {Target: "/root/.cache/go"}, {Target: "/"}},
		Binds: []proto.ProcessBind{{Target: "/run/secrets/token"}},
	})
	want := []string{"var/cache/apt", "root", "root/.cache", "root/.cache/pip", "root/.cache/go", "run", "run/secrets", "run/secrets/token"}
	if !slices.Equal(stubs, want) {
		t.Fatalf("stubs = %q, want %q", stubs, want)
	}
	// What the process's mounts made; it also left a file beside one.
	for _, s := range stubs[:len(stubs)-1] {
		if err := os.MkdirAll(filepath.Join(root, s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "run/secrets/token"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, ".husk-mounts-1/0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "root/kept"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	removeStubs(root, stubs, "/.husk-mounts-1", slog.New(slog.DiscardHandler))
	for _, gone := range []string{"var/cache/apt", "root/.cache", "run", ".husk-mounts-1"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left: %v", gone, err)
		}
	}
	for _, kept := range []string{"var/cache", "root/kept"} {
		if _, err := os.Lstat(filepath.Join(root, kept)); err != nil {
			t.Errorf("%s removed: %v", kept, err)
		}
	}
}
