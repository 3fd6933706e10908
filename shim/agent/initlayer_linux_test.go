//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteInitLayer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lost+found whiteout is a device node")
	}
	for _, tc := range []struct {
		name      string
		lostFound []string // files in the base's lost+found; nil: none at all
		hidden    bool
	}{
		{"empty lost+found is hidden", []string{}, true},
		{"lost+found with files is kept", []string{"#12"}, false},
		{"no lost+found", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, dir := t.TempDir(), filepath.Join(t.TempDir(), "init")
			if tc.lostFound != nil {
				if err := os.Mkdir(filepath.Join(base, "lost+found"), 0o700); err != nil {
					t.Fatal(err)
				}
				for _, f := range tc.lostFound {
					if err := os.WriteFile(filepath.Join(base, "lost+found", f), nil, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			// A stale layer from an earlier setup is replaced.
			if err := os.MkdirAll(filepath.Join(dir, "stale"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := writeInitLayer(dir, base); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "stale")); err == nil {
				t.Error("an earlier init layer's entry survived")
			}
			for _, e := range initLayerEntries {
				st, err := os.Lstat(filepath.Join(dir, e.path))
				if err != nil {
					t.Errorf("%s: %v", e.path, err)
					continue
				}
				var ok bool
				switch e.kind {
				case "dir":
					ok = st.IsDir()
				case "file":
					ok = st.Mode().IsRegular() && st.Size() == 0
				case "symlink":
					target, _ := os.Readlink(filepath.Join(dir, e.path))
					ok = target == e.target
				}
				if !ok {
					t.Errorf("%s is %v, want a %s %s", e.path, st.Mode(), e.kind, e.target)
				}
			}
			st, err := os.Lstat(filepath.Join(dir, "lost+found"))
			whiteout := err == nil && st.Mode()&os.ModeCharDevice != 0
			if whiteout != tc.hidden {
				t.Errorf("lost+found whiteout = %v, want %v", whiteout, tc.hidden)
			}
		})
	}
}
