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
	stubs := tmpfsStubs(root, []proto.ProcessTmpfs{{Target: "/var/cache/apt"}, {Target: "root/.cache/pip"}, {Target: "/root/.cache/go"}, {Target: "/"}})
	want := []string{"var/cache/apt", "root", "root/.cache", "root/.cache/pip", "root/.cache/go"}
	if !slices.Equal(stubs, want) {
		t.Fatalf("stubs = %q, want %q", stubs, want)
	}
	// What the process's mounts made; it also left a file beside one.
	for _, s := range stubs {
		if err := os.MkdirAll(filepath.Join(root, s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "root/kept"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	removeStubs(root, stubs, slog.New(slog.DiscardHandler))
	for _, gone := range []string{"var/cache/apt", "root/.cache"} {
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
