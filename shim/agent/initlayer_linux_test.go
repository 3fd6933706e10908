//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

func TestWriteInitLayer(t *testing.T) {
	dir, under := filepath.Join(t.TempDir(), "init"), filepath.Join(t.TempDir(), "init-under")
	// A stale layer from an earlier setup is replaced.
	for _, d := range []string{dir, under} {
		if err := os.MkdirAll(filepath.Join(d, "stale"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeInitLayer(dir, under); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, under} {
		if _, err := os.Lstat(filepath.Join(d, "stale")); err == nil {
			t.Errorf("an earlier init layer's entry survived in %s", d)
		}
	}
	// /proc, /sys, /dev/pts and /dev/shm go under the image, whose own
	// directories keep their modes.
	if _, err := os.Lstat(filepath.Join(dir, "proc")); err == nil {
		t.Error("proc is in the layer over the image")
	}
	for _, e := range proto.InitLayer() {
		p := filepath.Join(dir, e.Path)
		if e.Under {
			p = filepath.Join(under, e.Path)
		}
		st, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", e.Path, err)
			continue
		}
		var ok bool
		switch e.Kind {
		case proto.InitLayerDirectory:
			ok = st.IsDir()
		case proto.InitLayerFile:
			ok = st.Mode().IsRegular() && st.Size() == 0
		case proto.InitLayerSymlink:
			target, _ := os.Readlink(p)
			ok = target == e.Target
		}
		if !ok {
			t.Errorf("%s is %v, want kind %d %s", e.Path, st.Mode(), e.Kind, e.Target)
		}
	}
}

func TestWriteHideLostFound(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the whiteout is a device node")
	}
	dir := filepath.Join(t.TempDir(), "hide")
	if err := writeHideLostFound(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(filepath.Join(dir, "lost+found"))
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("lost+found is %v (%v), want a whiteout", st, err)
	}
}

func TestLowerDirs(t *testing.T) {
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
			for _, prebuilt := range []bool{false, true} {
				g := &GuestRootfs{Dir: t.TempDir()}
				if prebuilt {
					g.InitLayer, g.HideLostFound = "/husk/initlayer", "/husk/hide-lost-found"
				}
				base := filepath.Join(g.Dir, "base")
				if err := os.MkdirAll(base, 0o755); err != nil {
					t.Fatal(err)
				}
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
				layer, under, hide := filepath.Join(g.Dir, "init"), filepath.Join(g.Dir, "init-under"), filepath.Join(g.Dir, "hide-lost-found")
				if prebuilt {
					layer, under, hide = g.InitLayer, proto.InitLayerUnderDir, g.HideLostFound
				}
				want := []string{layer, base, under}
				if tc.hidden {
					want = []string{layer, hide, base, under}
				}
				if got := g.lowerDirs(); !slices.Equal(got, want) {
					t.Errorf("prebuilt %v: lower dirs %q, want %q", prebuilt, got, want)
				}
			}
		})
	}
}
