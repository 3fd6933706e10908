//go:build linux

package agent_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/proto"
)

// diffRoot is a DiffRootfs over plain directories: an overlay's upper
// directory laid out by hand and one lower.
type diffRoot struct {
	agent.DirRootfs
	upper, lower string
	freezes      int
	thawed       int
}

func (d *diffRoot) DiffDirs() (string, []string) { return d.upper, []string{d.lower} }

func (d *diffRoot) Freeze() (func() error, error) {
	d.freezes++
	return func() error { d.thawed++; return nil }, nil
}

// overlayTree writes a lower and an upper directory that exercise every
// rule of dockerd's change list. Whiteouts and the opaque marker
// need root (mknod, trusted.* attributes).
func overlayTree(t *testing.T) (upper, lower string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: overlay whiteouts are device nodes and opaque directories carry trusted.* attributes")
	}
	base := t.TempDir()
	upper, lower = filepath.Join(base, "upper"), filepath.Join(base, "lower")
	write := func(root, name, body string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"bin/sh", "etc/passwd", "old", "opq/a", "tmp/.keep", "var/lib/.keep"} {
		write(lower, f, "lower")
	}
	write(upper, "etc/passwd", "changed")
	write(upper, "new-dir/f", "new")
	write(upper, "opq/b", "new")
	write(upper, "tmp/.keep", "lower")
	write(upper, "tmp/new", "new")
	write(upper, "var/lib/.keep", "lower")
	write(upper, "var/lib/x", "new")
	// The agent's own mount points are no change of the container's.
	write(upper, "proc/self", "")
	write(upper, "dev/null", "")
	if err := unix.Mknod(filepath.Join(upper, "old"), unix.S_IFCHR, 0); err != nil {
		t.Fatalf("whiteout: %v", err)
	}
	if err := unix.Lsetxattr(filepath.Join(upper, "opq"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("this filesystem keeps no trusted.* attributes: %v", err)
	}
	// A file copied up but not changed (same size and mtime) is no
	// change; var/lib/.keep was rewritten (a new mtime).
	same := time.Unix(1700000000, 0)
	for _, root := range []string{upper, lower} {
		if err := os.Chtimes(filepath.Join(root, "tmp/.keep"), same, same); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(filepath.Join(upper, "var/lib/.keep"), same, same); err != nil {
		t.Fatal(err)
	}
	return upper, lower
}

func TestChangesAndDiffLayerOverTheWire(t *testing.T) {
	upper, lower := overlayTree(t)
	dr := &diffRoot{DirRootfs: agent.DirRootfs(t.TempDir()), upper: upper, lower: lower}
	a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: dr, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	f := &fixture{agent: a}
	c, _ := f.connect(t)

	if _, err := c.Changes(ctx(t)); err == nil || !strings.Contains(err.Error(), "not set up") {
		t.Errorf("changes before setup: %v", err)
	}
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "d"}); err != nil {
		t.Fatal(err)
	}

	got, err := c.Changes(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[proto.ChangeKind]string{proto.ChangeModify: "C", proto.ChangeAdd: "A", proto.ChangeDelete: "D"}
	var lines []string
	for _, ch := range got {
		lines = append(lines, kinds[ch.Kind]+" "+ch.Path)
	}
	want := []string{
		"C /etc", "C /etc/passwd",
		"A /new-dir", "A /new-dir/f",
		"D /old",
		"C /opq", "D /opq/a", "A /opq/b",
		"C /tmp", "A /tmp/new",
		"C /var", "C /var/lib", "C /var/lib/.keep", "A /var/lib/x",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("changes:\n got %q\nwant %q", lines, want)
	}

	// The layer: OCI whiteouts, nothing of the agent's mount points, and
	// the freeze held around it.
	var layer bytes.Buffer
	if err := c.DiffLayer(ctx(t), true, &layer); err != nil {
		t.Fatalf("diff layer: %v", err)
	}
	if dr.freezes != 1 || dr.thawed != 1 {
		t.Errorf("freezes %d, thaws %d; want 1 and 1", dr.freezes, dr.thawed)
	}
	names := tarNames(t, &layer)
	for _, n := range []string{".wh.old", "opq/.wh..wh..opq", "var/lib/x", "tmp/new"} {
		if !slices.Contains(names, n) {
			t.Errorf("layer lacks %s: %q", n, names)
		}
	}
	for _, n := range names {
		if strings.HasPrefix(n, "proc") || strings.HasPrefix(n, "dev") {
			t.Errorf("layer has the agent's mount point %s", n)
		}
	}
	if err := c.DiffLayer(ctx(t), false, io.Discard); err != nil || dr.freezes != 1 {
		t.Errorf("unfrozen diff: %v, freezes %d", err, dr.freezes)
	}
	// The session still works after the trailing Response.
	if _, err := c.Ping(ctx(t)); err != nil {
		t.Errorf("ping after diff: %v", err)
	}
}

func TestExportLeavesOutMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: export bind-mounts the container root")
	}
	f := newFixture(t)
	// A mount inside the root, as a volume is: export must not descend
	// into it.
	vol := filepath.Join(f.root, "vol")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", vol, "tmpfs", 0, ""); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(vol, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(vol, "in-volume"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _ := f.connect(t)
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "e"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.Export(ctx(t), &out); err != nil {
		t.Fatalf("export: %v", err)
	}
	names := tarNames(t, &out)
	if !slices.Contains(names, "vol/") {
		t.Errorf("export lacks the mount point vol/: %q", names)
	}
	if slices.Contains(names, "vol/in-volume") {
		t.Errorf("export went into a mount: %q", names)
	}
	if len(names) < 3 || slices.Contains(names, "./") || slices.Contains(names, "") {
		t.Errorf("export names = %q", names)
	}
}

func tarNames(t *testing.T, r io.Reader) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		names = append(names, hdr.Name)
	}
}
