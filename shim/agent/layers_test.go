//go:build linux

package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// newStack mounts an overlay stack over a base directory built by fill,
// all in temporary directories; it skips without root or overlayfs.
func newStack(t *testing.T, fill func(base string)) layerStack {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts overlayfs and writes whiteout devices")
	}
	d := t.TempDir()
	l := layerStack{base: filepath.Join(d, "base"), disk: filepath.Join(d, "disk"), root: filepath.Join(d, "root")}
	for _, p := range []string{l.base, l.disk, l.root} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fill(l.base)
	if err := l.remount(); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENODEV) {
			t.Skipf("cannot mount overlayfs here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(l.root, unix.MNT_DETACH) })
	return l
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		body := h.Linkname
		if h.Typeflag == tar.TypeReg {
			h.Linkname, h.Size = "", int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// entries lists a layer tar as "name type" lines (links with their
// target, files with their content).
func entries(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			sort.Strings(out)
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		switch h.Typeflag {
		case tar.TypeLink:
			out = append(out, h.Name+" link "+h.Linkname)
		case tar.TypeDir:
			out = append(out, h.Name+" dir")
		default:
			out = append(out, h.Name+" file "+string(body))
		}
	}
}

func TestApplyAndCutLayers(t *testing.T) {
	l := newStack(t, func(base string) {
		mustWrite(t, filepath.Join(base, "etc/group"), "root:x:0:\n")
		mustWrite(t, filepath.Join(base, "data/keep"), "keep")
		mustWrite(t, filepath.Join(base, "opq/old"), "old")
		if err := os.Chmod(filepath.Join(base, "etc"), 0o750); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()

	// A layer made on the host (COPY): a new file under an implied
	// directory, a whiteout and an opaque directory.
	layer := tarOf(t,
		&tar.Header{Name: "etc/copied", Typeflag: tar.TypeReg, Mode: 0o600, Linkname: "copied"},
		&tar.Header{Name: "data/.wh.keep", Typeflag: tar.TypeReg},
		&tar.Header{Name: "opq/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "opq/.wh..wh..opq", Typeflag: tar.TypeReg},
		&tar.Header{Name: "opq/new", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: "new"},
		&tar.Header{Name: "escape/../../x", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: "inside"},
	)
	if err := l.apply(ctx, bytes.NewReader(layer)); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.root, "data/keep")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("whited-out data/keep still there: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(l.root, "opq")); len(ents) != 1 || ents[0].Name() != "new" {
		t.Errorf("opaque opq = %v, want only new", ents)
	}
	if st, err := os.Stat(filepath.Join(l.root, "etc")); err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("implied etc = %v %v, want the root's mode 0750 kept", st.Mode(), err)
	}
	if b, _ := os.ReadFile(filepath.Join(l.root, "x")); string(b) != "inside" {
		t.Errorf("a climbing name did not land inside the root: %q", b)
	}

	// A RUN's changes: delete a lower file, add files, a hard link, a new
	// opaque directory, plus the mount points the agent makes.
	root := l.root
	if err := os.Remove(filepath.Join(root, "etc/group")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(root, "etc/added"), "added")
	mustWrite(t, filepath.Join(root, "h1"), "linked")
	if err := os.Link(filepath.Join(root, "h1"), filepath.Join(root, "h2")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "opq")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(root, "opq/fresh"), "fresh")
	for _, d := range []string{"proc", "sys", "dev"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
	}
	mustWrite(t, filepath.Join(root, "etc/hosts"), "")

	var cut bytes.Buffer
	if err := l.cut(ctx, &cut); err != nil {
		t.Fatalf("cut: %v", err)
	}
	got := strings.Join(entries(t, cut.Bytes()), "\n")
	want := strings.Join([]string{
		"etc/ dir",
		"etc/.wh.group file ",
		"etc/added file added",
		"h1 file linked",
		"h2 link h1",
		"opq/ dir",
		"opq/.wh..wh..opq file ",
		"opq/fresh file fresh",
	}, "\n")
	if got != want {
		t.Errorf("cut layer:\n%s\nwant:\n%s", got, want)
	}
	// The changes stay visible, now from a lower layer, and a new cut is
	// empty.
	if b, _ := os.ReadFile(filepath.Join(root, "etc/added")); string(b) != "added" {
		t.Errorf("after the cut etc/added = %q", b)
	}
	var empty bytes.Buffer
	if err := l.cut(ctx, &empty); err != nil {
		t.Fatal(err)
	}
	if e := entries(t, empty.Bytes()); len(e) != 0 {
		t.Errorf("second cut = %v, want nothing", e)
	}
	ls, _ := l.layers()
	if len(ls) != 3 {
		t.Errorf("stack has %d layers, want 3 (applied, cut, empty cut)", len(ls))
	}

	// Uncut changes refuse a layer on top.
	mustWrite(t, filepath.Join(root, "pending"), "x")
	if err := l.apply(ctx, bytes.NewReader(tarOf(t))); err == nil {
		t.Error("apply over uncut changes succeeded")
	}
}
