package templates

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/templates/templatestest"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/agent/cinit"
)

// testInitExe is the container init the in-process agents start their
// warm-up's process with (cinit.Build), or "" where no C compiler is.
var testInitExe string

func TestMain(m *testing.M) {
	// The in-process agents re-execute this test binary as their archive
	// helper.
	agent.Reexec()
	os.Exit(cinit.RunTests(m.Run, &testInitExe))
}

func newWarmingManager(t *testing.T, d *fakeDriver, taps *fakeTaps, disks Disks) *Manager {
	t.Helper()
	return newManagerWith(t, Options{Dir: t.TempDir(), Driver: d, Taps: taps, Disks: disks, WarmDiskSize: 64 << 20})
}

// TestBuildWarmsTemplate: with Disks set, a template guest has two blank
// disks plugged (a read-only base and an upper), its agent runs the
// throwaway container on them, and they are unplugged and their files
// removed before the snapshot; containers then restore it as usual.
func TestBuildWarmsTemplate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the warm-up runs a process in new namespaces")
	}
	if testInitExe == "" {
		t.Skip("needs a C compiler (musl-gcc or cc) to build the container init")
	}
	ctx := context.Background()
	d := &fakeDriver{t: t, version: "1", hotplug: true, plug: true, refresh: &fakeRefresher{}}
	disks := &templatestest.Disks{}
	m := newWarmingManager(t, d, &fakeTaps{}, disks)
	if _, err := m.Start(ctx, vmCfg(m, 1)); !errdefs.IsNotFound(err) {
		t.Fatalf("first start: %v, want not found (no template yet)", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	plugged, unplugged := append(d.plugged[:0:0], d.plugged...), d.unplugged
	d.mu.Unlock()
	if len(plugged) != 2 || !plugged[0].ReadOnly || plugged[1].ReadOnly ||
		!strings.HasPrefix(plugged[0].Serial, "warmbtpl") || !strings.HasPrefix(plugged[1].Serial, "warmutpl") {
		t.Errorf("warm-up plugged %+v, want a read-only warmbtpl… base and a warmutpl… upper", plugged)
	}
	if unplugged != 2 {
		t.Errorf("warm-up unplugged %d disks, want 2", unplugged)
	}
	made := disks.Made()
	if len(made) != 2 {
		t.Errorf("warm-up made disks %v, want 2", made)
	}
	for _, f := range made {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("warm-up disk %s not removed: %v", f, err)
		}
	}
	vm, err := m.Start(ctx, vmCfg(m, 1))
	if err != nil {
		t.Fatalf("start from the warmed template: %v", err)
	}
	vm.Client.Close()
}

// TestWarmFailureFailsBuild: a template whose warm-up fails is not kept;
// its VM and TAPs are gone, and containers are told why they boot cold.
func TestWarmFailureFailsBuild(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{t: t, version: "1", hotplug: true, plug: true, refresh: &fakeRefresher{}}
	taps := &fakeTaps{}
	m := newWarmingManager(t, d, taps, &templatestest.Disks{Fail: true})
	if _, err := m.Start(ctx, vmCfg(m, 1)); !errdefs.IsNotFound(err) {
		t.Fatalf("first start: %v, want not found (no template yet)", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := m.Start(ctx, vmCfg(m, 1))
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "build failed") || !strings.Contains(err.Error(), "injected failure") {
		t.Errorf("start after a failed warm-up: %v, want not found naming the failed build", err)
	}
	d.mu.Lock()
	killed := d.killed
	d.mu.Unlock()
	if killed != 1 || len(taps.live) != 0 {
		t.Errorf("after the failed build: %d VMs killed, TAPs %v left; want 1 and none", killed, taps.live)
	}
	entries, _ := os.ReadDir(m.opts.Dir)
	if len(entries) != 0 {
		t.Errorf("template dir holds %d entries after the failed build", len(entries))
	}
}

func TestWarmSerials(t *testing.T) {
	base := vmm.Disk{ReadOnly: true, Serial: "husk-base", Removable: true}
	upper := vmm.Disk{Serial: "husk-upper", Removable: true}
	for _, c := range []struct {
		name        string
		slots       []vmm.Disk
		base, upper string
	}{
		{"no slots", nil, "warmbx", "warmux"},
		{"base and upper", []vmm.Disk{base, upper}, "husk-base", "husk-upper"},
		{"upper first", []vmm.Disk{upper, base}, "husk-base", "husk-upper"},
		{"no writable slot", []vmm.Disk{base}, "warmbx", "warmux"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if b, u := warmSerials(c.slots, "x"); b != c.base || u != c.upper {
				t.Errorf("warmSerials = %q, %q; want %q, %q", b, u, c.base, c.upper)
			}
		})
	}
}
