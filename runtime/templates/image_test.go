package templates

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
)

// markedDisks makes upper disks holding a marker, so a test can tell a
// template's upper from a container's.
type markedDisks struct{}

const templateUpperMark = "made by the template's Disks"

func (markedDisks) NewUpper(_ context.Context, path string, _ int64) error {
	return os.WriteFile(path, []byte(templateUpperMark), 0o600)
}

var testSlots = []vmm.Disk{{ReadOnly: true, Serial: "husk-base", Removable: true}, {Serial: "husk-upper", Removable: true}}

// imageCfg is vmCfg with base and upper disks that exist, in dir.
func imageCfg(t *testing.T, m *Manager, dir, base string) vmm.Config {
	t.Helper()
	cfg := vmCfg(m, 1)
	cfg.Disks[0].Path, cfg.Disks[1].Path = filepath.Join(dir, base), filepath.Join(dir, "upper-"+base)
	if _, err := os.Stat(cfg.Disks[0].Path); os.IsNotExist(err) {
		if err := os.WriteFile(cfg.Disks[0].Path, []byte("base "+base), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(cfg.Disks[1].Path, []byte("the container's fresh upper"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestStartImage: an image template is built only once its shape's
// template is ready, by restoring that template with file-backed RAM,
// the image's base and a new upper disk, and snapshotting it again; a
// start from it replaces the container's upper disk by a copy of the
// template's and restores with the container's disks as they are,
// attaching nothing. A new Manager keeps it while the base disk is the
// same file, and drops it once the base is another file.
func TestStartImage(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{t: t, version: "1", hotplug: true, refresh: &fakeRefresher{}}
	taps := &fakeTaps{}
	tdir, work := t.TempDir(), t.TempDir()
	m := newManagerWith(t, Options{Dir: tdir, Driver: d, Taps: taps, Slots: testSlots, Disks: markedDisks{}})

	cfg := imageCfg(t, m, work, "a")
	if _, err := m.StartImage(ctx, cfg); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "shape") {
		t.Fatalf("image start before the shape's template: %v, want not found for want of the shape's template", err)
	}
	if _, err := m.Start(ctx, cfg); !errdefs.IsNotFound(err) {
		t.Fatalf("first start: %v, want not found", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StartImage(ctx, cfg); !errdefs.IsNotFound(err) {
		t.Fatalf("image start before its template: %v, want not found", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(d.restores) != 1 || !d.restores[0].FileMemory || !slices.Equal(d.restores[0].Disks, testSlots) {
		t.Fatalf("image template build restored %+v, want one with file memory and the empty slots", d.restores)
	}
	if len(d.attached) != 1 || len(d.attached[0]) != 2 || d.attached[0][0] != cfg.Disks[0] ||
		d.attached[0][1].Serial != "husk-upper" || d.attached[0][1].Path == cfg.Disks[1].Path {
		t.Fatalf("image template build attached %+v, want the image's base and an upper of its own", d.attached)
	}
	if len(taps.live) != 0 {
		t.Errorf("taps left after the build: %v", taps.live)
	}
	if b, _ := os.ReadFile(cfg.Disks[1].Path); string(b) != "the container's fresh upper" {
		t.Errorf("a start that found no image template changed the upper disk to %q", b)
	}

	vm, err := m.StartImage(ctx, cfg)
	if err != nil {
		t.Fatalf("start from the image template: %v", err)
	}
	vm.Client.Close()
	if len(d.restores) != 2 || !slices.Equal(d.restores[1].Disks, cfg.Disks) || d.restores[1].FileMemory {
		t.Errorf("restore %+v, want the container's own disks and mapped RAM", d.restores[1])
	}
	if !strings.HasPrefix(filepath.Base(filepath.Dir(d.from[1])), imagePrefix) {
		t.Errorf("restored from %s, want an image template", d.from[1])
	}
	if len(d.attached) != 1 {
		t.Errorf("a start from an image template attached disks: %+v", d.attached[1:])
	}
	if b, _ := os.ReadFile(cfg.Disks[1].Path); string(b) != templateUpperMark {
		t.Errorf("upper disk holds %q, want a copy of the template's", b)
	}
	if len(vm.DeviceMACs) != 1 || vm.DeviceMACs[0] != d.starts[0].Nets[0].MAC {
		t.Errorf("DeviceMACs %v, want the shape template's %s", vm.DeviceMACs, d.starts[0].Nets[0].MAC)
	}

	reopen := func() *Manager {
		m2, err := New(ctx, Options{Dir: tdir, Driver: d, Kernel: m.opts.Kernel, Initramfs: m.opts.Initramfs, Accel: "tcg", Taps: taps, Slots: testSlots, Disks: markedDisks{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m2.Close)
		return m2
	}
	if m2 := reopen(); len(m2.ready) != 2 {
		t.Errorf("reopened: %d templates, want the shape's and the image's", len(m2.ready))
	}
	// The image pulled again: another file at the same path.
	if err := os.Remove(cfg.Disks[0].Path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Disks[0].Path, []byte("base a, again"), 0o444); err != nil {
		t.Fatal(err)
	}
	m3 := reopen()
	entries, _ := os.ReadDir(tdir)
	if len(m3.ready) != 1 || len(entries) != 1 {
		t.Errorf("after the base changed: %d templates, %d dirs, want only the shape's", len(m3.ready), len(entries))
	}
}

// TestImageTemplatesEvicted: beyond Options.ImageTemplates, the image
// template least recently made or used goes.
func TestImageTemplatesEvicted(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{t: t, version: "1", hotplug: true, refresh: &fakeRefresher{}}
	tdir, work := t.TempDir(), t.TempDir()
	m := newManagerWith(t, Options{Dir: tdir, Driver: d, Taps: &fakeTaps{}, Slots: testSlots, Disks: markedDisks{}, ImageTemplates: 2})
	if _, err := m.Start(ctx, imageCfg(t, m, work, "a")); !errdefs.IsNotFound(err) {
		t.Fatalf("first start: %v, want not found", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	build := func(base string) {
		t.Helper()
		if _, err := m.StartImage(ctx, imageCfg(t, m, work, base)); !errdefs.IsNotFound(err) {
			t.Fatalf("first image start of %s: %v, want not found", base, err)
		}
		if err := m.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	build("a")
	build("b")
	vm, err := m.StartImage(ctx, imageCfg(t, m, work, "a"))
	if err != nil {
		t.Fatal(err)
	}
	vm.Client.Close()
	kept := func() []string {
		t.Helper()
		var images []string
		for n, md := range m.ready {
			if strings.HasPrefix(n, imagePrefix) {
				images = append(images, filepath.Base(md.Image.Base.Path))
				if _, err := os.Stat(filepath.Join(tdir, n)); err != nil {
					t.Errorf("template of %s: %v", md.Image.Base.Path, err)
				}
			}
		}
		slices.Sort(images)
		return images
	}
	build("c")
	if got := kept(); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("image templates of %v kept, want a (used) and c (new)", got)
	}
	// The image of c is removed: its template goes with the next build,
	// though it is newer than a's.
	if err := os.Remove(filepath.Join(work, "c")); err != nil {
		t.Fatal(err)
	}
	build("d")
	if got := kept(); !slices.Equal(got, []string{"a", "d"}) {
		t.Errorf("image templates of %v kept, want a and d (c's image is gone)", got)
	}
	if entries, _ := os.ReadDir(tdir); len(entries) != 3 {
		t.Errorf("%d template dirs, want 3", len(entries))
	}
}

// TestImageTemplatesUnsupported: a VMM whose restores cannot write their
// RAM through to a file (cloud-hypervisor) makes no image template, and
// after the first refusal none is tried again.
func TestImageTemplatesUnsupported(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{t: t, version: "1", hotplug: true, noFileMemory: true, refresh: &fakeRefresher{}}
	work := t.TempDir()
	m := newManagerWith(t, Options{Dir: t.TempDir(), Driver: d, Taps: &fakeTaps{}, Slots: testSlots, Disks: markedDisks{}})
	if _, err := m.Start(ctx, imageCfg(t, m, work, "a")); !errdefs.IsNotFound(err) {
		t.Fatalf("first start: %v, want not found", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StartImage(ctx, imageCfg(t, m, work, "a")); !errdefs.IsNotFound(err) {
		t.Fatalf("first image start: %v, want not found", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := m.StartImage(ctx, imageCfg(t, m, work, "b"))
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "cannot make them") {
		t.Fatalf("image start of another image: %v, want not found, the VMM cannot make them", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(d.restores) != 0 {
		t.Errorf("restores %+v, want none", d.restores)
	}
}
