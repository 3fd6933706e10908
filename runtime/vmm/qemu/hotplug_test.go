package qemu

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
)

// TestAttachDisksAfterRestore is the template path at the driver's level:
// a diskless VM is snapshotted, restored, and given two disks by
// hot-plug, which its guest then sees by serial; a snapshot of that VM
// restores into a VM started with the two disks on its command line
// (same PCI slots), its memory intact.
func TestAttachDisksAfterRestore(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	drv := New(Options{Binary: env.qemu})

	diskless := func(id string) vmm.Config {
		c := vmConfig(t, env, id)
		c.Disks = nil
		return c
	}
	tpl, err := drv.Start(ctx, diskless("tpl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(tpl) })
	if r := say(t, ctx, tpl, "hello"); r != "ready" {
		t.Fatalf("diskless guest said %q, want ready", r)
	}
	if r := say(t, ctx, tpl, "incr"); r != "count 1" {
		t.Fatalf("guest counted %q", r)
	}
	snap := t.TempDir()
	if err := tpl.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}

	restoredCfg := diskless("restored")
	m, err := drv.Restore(ctx, restoredCfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(m) })
	full := vmConfig(t, env, "full")
	start := time.Now()
	if err := m.(*Machine).AttachDisks(ctx, full.Disks); err != nil {
		t.Fatal(err)
	}
	want := "ready sda=husk-base:ro sdb=husk-upper:rw"
	awaitDisks(t, ctx, m, restoredCfg.Dir, want)
	t.Logf("hot-plug of two disks to seen by the guest: %v", time.Since(start))
	if r := say(t, ctx, m, "incr"); r != "count 2" {
		t.Fatalf("restored guest counted %q, want count 2", r)
	}

	snap2 := t.TempDir()
	if err := m.Snapshot(ctx, snap2); err != nil {
		t.Fatal(err)
	}
	again, err := drv.Restore(ctx, full, snap2)
	if err != nil {
		t.Fatalf("restore a hot-plugged VM's snapshot into one started with its disks: %v", err)
	}
	t.Cleanup(func() { stopVM(again) })
	if r := say(t, ctx, again, "incr"); r != "count 3" {
		t.Errorf("restore of the hot-plugged VM counted %q, want count 3", r)
	}
	if r := say(t, ctx, again, "hello"); diskSet(r) != diskSet(want) {
		t.Errorf("restore of the hot-plugged VM sees %q, want %q", r, want)
	}
}

func TestAttachDisksMicroVM(t *testing.T) {
	m := newMachine(t.TempDir(), nil, 1, nil)
	m.layout = &layout{Machine: MachineMicroVM}
	err := m.AttachDisks(context.Background(), []vmm.Disk{{Path: "/x", Serial: "s"}})
	if !errdefs.IsNotImplemented(err) || !strings.Contains(err.Error(), "microvm") {
		t.Fatalf("AttachDisks on microvm: %v, want not implemented", err)
	}
}

// TestDetachDisks is the pool's warm-up at the driver's level: two disks
// plugged into a running VM and unplugged again leave it with the devices
// it had, so the container's disks then land where a VM started with them
// has them: the guest sees them by their serials, and a snapshot restores
// into a VM started with those disks.
func TestDetachDisks(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	drv := New(Options{Binary: env.qemu})
	full := vmConfig(t, env, "full")
	cfg := vmConfig(t, env, "warmed")
	cfg.Disks = nil
	vm, err := drv.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(vm) })
	m := vm.(*Machine)
	if r := say(t, ctx, m, "hello"); r != "ready" {
		t.Fatalf("diskless guest said %q, want ready", r)
	}
	if err := m.DetachDisks(ctx, 1); !errdefs.IsInvalidArgument(err) {
		t.Errorf("detach from a VM without disks: %v, want invalid argument", err)
	}
	warm := []vmm.Disk{
		{Path: full.Disks[0].Path, ReadOnly: true, Serial: "warmb"},
		{Path: full.Disks[1].Path, Serial: "warmu"},
	}
	if err := m.AttachDisks(ctx, warm); err != nil {
		t.Fatal(err)
	}
	awaitDisks(t, ctx, m, cfg.Dir, "ready sda=warmb:ro sdb=warmu:rw")
	if err := m.DetachDisks(ctx, 2); err != nil {
		t.Fatal(err)
	}
	awaitDisks(t, ctx, m, cfg.Dir, "ready")
	if err := m.AttachDisks(ctx, full.Disks); err != nil {
		t.Fatalf("plug the container's disks after the warm-up's: %v", err)
	}
	want := "ready sda=husk-base:ro sdb=husk-upper:rw"
	awaitDisks(t, ctx, m, cfg.Dir, want)
	if r := say(t, ctx, m, "incr"); r != "count 1" {
		t.Fatalf("guest counted %q", r)
	}
	snap := t.TempDir()
	if err := m.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	again, err := drv.Restore(ctx, full, snap)
	if err != nil {
		t.Fatalf("restore the warmed VM's snapshot into one started with its disks: %v", err)
	}
	t.Cleanup(func() { stopVM(again) })
	if r := say(t, ctx, again, "incr"); r != "count 2" {
		t.Errorf("restore counted %q, want count 2", r)
	}
	if r := say(t, ctx, again, "hello"); diskSet(r) != diskSet(want) {
		t.Errorf("restore sees %q, want %q", r, want)
	}
}

// awaitDisks says hello to the guest until the disks it lists (serial and
// mode, whatever their sd names: the guest probes hot-plugged SCSI disks
// concurrently and names them in the order the probes end) are want's.
// Each attempt has a deadline and a connection of its own, so a lost line
// is told from a hung guest; retries are logged, and a failure ends with
// the guest's console.
func awaitDisks(t *testing.T, ctx context.Context, m vmm.Machine, dir, want string) {
	t.Helper()
	const perAttempt = 20 * time.Second
	var got string
	var lastErr error
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, perAttempt)
		c, err := m.DialAgent(actx)
		if err == nil {
			got, err = exchange(actx, c, "hello")
			c.Close()
		}
		cancel()
		switch {
		case err == nil && diskSet(got) == diskSet(want):
			return
		case err != nil:
			lastErr = err
			t.Logf("hello: no answer in %v (%v); asking again on a new connection", perAttempt, err)
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	console, _ := os.ReadFile(filepath.Join(dir, consoleLog))
	t.Fatalf("guest never listed the disks of %q: last answer %q, last error %v; console:\n%s", want, got, lastErr, console)
}

// TestRemovableDisks is the template path with empty removable disks: a
// VM booted with them is snapshotted and restored, its disks are inserted
// as media, taken out and replaced by others of other sizes, and the
// guest sees each medium's size and data when it opens the disk; a
// snapshot then restores into a VM started with the disks, which keep
// their media.
func TestRemovableDisks(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	drv := New(Options{Binary: env.qemu})
	slots := []vmm.Disk{{ReadOnly: true, Serial: "husk-base", Removable: true}, {Serial: "husk-upper", Removable: true}}
	withSlots := func(id string) vmm.Config {
		c := vmConfig(t, env, id)
		c.Disks = slots
		return c
	}
	tpl, err := drv.Start(ctx, withSlots("tpl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(tpl) })
	// An empty disk reads as writable: write protection is the medium's.
	if r := say(t, ctx, tpl, "hello"); diskSet(r) != diskSet("ready sda=husk-base:rw sdb=husk-upper:rw") {
		t.Fatalf("guest with empty disks said %q", r)
	}
	snap := t.TempDir()
	if err := tpl.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	cfg := withSlots("restored")
	vm, err := drv.Restore(ctx, cfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(vm) })
	m := vm.(*Machine)
	if r, want := say(t, ctx, m, "media"), "media sda=husk-base:none sdb=husk-upper:none"; diskSet(r) != diskSet(want) {
		t.Fatalf("restored guest's disks: %q, want %q", r, want)
	}
	image := func(name, data string, size int64) string {
		p := filepath.Join(cfg.Dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := []vmm.Disk{
		{Path: image("b1", "BASE-ONE", 1<<20), ReadOnly: true, Serial: "husk-base"},
		{Path: image("u1", "UPPER-1", 2<<20), Serial: "husk-upper"},
	}
	second := []vmm.Disk{
		{Path: image("b2", "BASE-TWO", 3<<20), ReadOnly: true, Serial: "husk-base"},
		{Path: image("u2", "UPPER-2", 1<<20), Serial: "husk-upper"},
	}
	if err := m.AttachDisks(ctx, first); err != nil {
		t.Fatal(err)
	}
	if r, want := say(t, ctx, m, "media"), "media sda=husk-base:1048576:BASE-ONE sdb=husk-upper:2097152:UPPER-1"; diskSet(r) != diskSet(want) {
		t.Fatalf("after the insert: %q, want %q", r, want)
	}
	if got := len(m.layout.Disks); got != 2 {
		t.Fatalf("layout has %d disks after inserts, want the 2 it had", got)
	}
	if err := m.DetachDisks(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if r, want := say(t, ctx, m, "media"), "media sda=husk-base:none sdb=husk-upper:none"; diskSet(r) != diskSet(want) {
		t.Fatalf("after the eject: %q, want %q", r, want)
	}
	if err := m.AttachDisks(ctx, second); err != nil {
		t.Fatal(err)
	}
	want := "media sda=husk-base:3145728:BASE-TWO sdb=husk-upper:1048576:UPPER-2"
	if r := say(t, ctx, m, "media"); diskSet(r) != diskSet(want) {
		t.Fatalf("after the second insert: %q, want %q", r, want)
	}
	if r := say(t, ctx, m, "incr"); r != "count 1" {
		t.Fatalf("guest counted %q", r)
	}
	snap2 := t.TempDir()
	if err := m.Snapshot(ctx, snap2); err != nil {
		out, _ := os.ReadFile(filepath.Join(cfg.Dir, outputLog))
		t.Fatalf("%v\n%s", err, out)
	}
	full := vmConfig(t, env, "full")
	full.Disks = second
	again, err := drv.Restore(ctx, full, snap2)
	if err != nil {
		t.Fatalf("restore a VM with inserted disks into one started with them: %v", err)
	}
	t.Cleanup(func() { stopVM(again) })
	if r := say(t, ctx, again, "incr"); r != "count 2" {
		t.Errorf("restored guest counted %q, want count 2", r)
	}
	if r := say(t, ctx, again, "media"); diskSet(r) != diskSet(want) {
		t.Errorf("restored guest's disks: %q, want %q", r, want)
	}
}
