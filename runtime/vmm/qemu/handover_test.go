package qemu

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
)

// TestRelocateFollowsTheDirectory: after its directory is renamed, the
// Machine writes its layout into the new one, and refuses a directory
// that is not the one it holds.
func TestRelocateFollowsTheDirectory(t *testing.T) {
	parent := t.TempDir()
	old, moved := filepath.Join(parent, "pool-vm"), filepath.Join(parent, "vm")
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}
	dirFD, err := vmmproc.OpenDir(old)
	if err != nil {
		t.Fatal(err)
	}
	m := newMachine(old, dirFD, 42, slog.New(slog.DiscardHandler))
	t.Cleanup(m.releaseFDs)
	m.layout = &layout{Machine: MachineQ35, Nets: 1, NICs: []layoutNIC{{Slot: 0, MAC: "52:54:00:12:34:56"}}, Slots: pciSlotPlan}
	if err := os.Rename(old, moved); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := m.Relocate(other); !errdefs.IsInvalidArgument(err) {
		t.Errorf("relocate to another directory: %v, want invalid argument", err)
	}
	if err := m.Relocate(moved); err != nil {
		t.Fatal(err)
	}
	if err := m.RecordNICMACs([]string{"02:42:0A:7B:00:09"}); err != nil {
		t.Fatal(err)
	}
	l := readLayout(t, moved)
	if want := []layoutNIC{{Slot: 0, MAC: "02:42:0a:7b:00:09"}}; !slices.Equal(l.NICs, want) {
		t.Errorf("layout NICs %+v, want %+v", l.NICs, want)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old directory came back: %v", err)
	}
}

// TestRecordNICMACsChecksTheCount: a list of another length, or a bad
// address, changes nothing.
func TestRecordNICMACsChecksTheCount(t *testing.T) {
	m := hotplugMachine(t)
	for _, macs := range [][]string{nil, {"02:42:0a:7b:00:03", "02:42:0a:7b:00:04"}, {"not-a-mac"}} {
		if err := m.RecordNICMACs(macs); !errdefs.IsInvalidArgument(err) {
			t.Errorf("RecordNICMACs(%q): %v, want invalid argument", macs, err)
		}
	}
	if _, err := os.Stat(filepath.Join(m.dir, layoutFile)); !os.IsNotExist(err) {
		t.Errorf("a refused record wrote the layout: %v", err)
	}
}
