package qemu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
)

func vmConfig(t *testing.T, env bootEnv, id string) vmm.Config {
	t.Helper()
	dir := t.TempDir()
	return vmm.Config{
		ID: id, Dir: dir, Kernel: env.kernel.Path, Initramfs: env.initramfs,
		MemoryMiB: 256, CPUs: 1, Accel: "tcg",
		Disks: []vmm.Disk{
			{Path: disk(t, dir, "base.img"), ReadOnly: true, Serial: "husk-base"},
			{Path: disk(t, dir, "upper.img"), Serial: "husk-upper"},
		},
	}
}

// say sends line to the guest's init over a fresh agent connection and
// returns its answer.
func say(t *testing.T, ctx context.Context, m vmm.Machine, line string) string {
	t.Helper()
	c, err := m.DialAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reply, err := exchange(ctx, c, line)
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return reply
}

// startCounting boots a VM for cfg and has its guest count to 2, the
// state the snapshot tests take.
func startCounting(t *testing.T, ctx context.Context, drv *Driver, cfg vmm.Config) vmm.Machine {
	t.Helper()
	m, err := drv.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(m) })
	if r := say(t, ctx, m, "hello"); !strings.HasPrefix(r, "ready") {
		t.Fatalf("guest said %q", r)
	}
	for _, want := range []string{"count 1", "count 2"} {
		if r := say(t, ctx, m, "incr"); r != want {
			t.Fatalf("guest counted %q, want %q", r, want)
		}
	}
	return m
}

// restoreAtOnce restores snap into a VM for each of cfgs, all at once.
func restoreAtOnce(t *testing.T, ctx context.Context, drv *Driver, snap string, cfgs ...vmm.Config) []vmm.Machine {
	t.Helper()
	var wg sync.WaitGroup
	machines := make([]vmm.Machine, len(cfgs))
	errs := make([]error, len(cfgs))
	for i := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			machines[i], errs[i] = drv.Restore(ctx, cfgs[i], snap)
		}()
	}
	wg.Wait()
	for _, m := range machines {
		if m != nil {
			t.Cleanup(func() { stopVM(m) })
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
	}
	return machines
}

func stopVM(m vmm.Machine) {
	_ = m.Kill()
	_ = m.Cleanup()
}

// TestSnapshotRestore boots a VM, counts in the guest's memory, takes a
// snapshot while the host holds an agent connection, lets the original go
// on, and restores the snapshot twice at once into new directories: each
// copy continues from the snapshotted count on its own.
func TestSnapshotRestore(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	drv := New(Options{Binary: env.qemu})

	src := vmConfig(t, env, "snap-src")
	m := startCounting(t, ctx, drv, src)

	// The host is connected, as huskd is, while the snapshot is taken.
	held, err := m.DialAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap := t.TempDir()
	start := time.Now()
	if err := m.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	st, err := os.Stat(filepath.Join(snap, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() == 0 {
		t.Fatal("empty snapshot")
	}
	t.Logf("snapshot of a %d MiB guest: %d bytes in %v", src.MemoryMiB, st.Size(), took)
	held.Close()
	assertSplit(t, snap)
	if l := readLayout(t, snap); l.CPU != cpuTCG || l.Firmware != drv.bootFirmware(ctx) {
		t.Errorf("snapshot layout CPU %q, firmware %q; want %q, %q", l.CPU, l.Firmware, cpuTCG, drv.bootFirmware(ctx))
	}

	// The original goes on from where it was.
	if err := m.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if r := say(t, ctx, m, "incr"); r != "count 3" {
		t.Fatalf("original after resume: %q, want count 3", r)
	}

	start = time.Now()
	machines := restoreAtOnce(t, ctx, drv, snap, vmConfig(t, env, "snap-a"), vmConfig(t, env, "snap-b"))
	t.Logf("two concurrent restores, resumed: %v", time.Since(start))
	replies := make([][]string, len(machines))
	for i, rm := range machines {
		replies[i] = []string{say(t, ctx, rm, "incr"), say(t, ctx, rm, "incr")}
	}
	for i, r := range replies {
		if r[0] != "count 3" || r[1] != "count 4" {
			t.Errorf("restore %d counted %q, want [count 3 count 4]", i, r)
		}
	}
	if r := say(t, ctx, m, "incr"); r != "count 4" {
		t.Errorf("original after the restores: %q, want count 4", r)
	}

	// A restored VM can itself be snapshotted and restored.
	if err := machines[0].Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap2 := t.TempDir()
	if err := machines[0].Snapshot(ctx, snap2); err != nil {
		t.Fatal(err)
	}
	// A snapshot from before layouts named the CPU restores on the CPU
	// TCG guests booted on then.
	l := readLayout(t, snap2)
	if l.CPU != cpuTCG {
		t.Errorf("a restore's snapshot layout CPU = %q, want %q", l.CPU, cpuTCG)
	}
	l.CPU = ""
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(snap2, layoutFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	againCfg := vmConfig(t, env, "snap-again")
	gateRan := false
	againCfg.BeforeResume = func(context.Context) error {
		gateRan = true
		return nil
	}
	again, err := drv.Restore(ctx, againCfg, snap2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(again) })
	if !gateRan {
		t.Error("Restore did not run BeforeResume")
	}
	if r := say(t, ctx, again, "incr"); r != "count 5" {
		t.Errorf("restore of a restore: %q, want count 5", r)
	}
	args := qemuCommandLine(t, again)
	if got := argAfter(args, "-cpu"); !slices.Equal(got, []string{cpuTCGLegacy}) {
		t.Errorf("restore of a layout without a CPU: -cpu %q, want %q", got, cpuTCGLegacy)
	}
	if f := drv.bootFirmware(ctx); f != "" && !slices.Equal(argAfter(args, "-bios"), []string{f}) {
		t.Errorf("restore: -bios %q, want the snapshot's %q", argAfter(args, "-bios"), f)
	}
}

// TestRestoreRefuses checks that a snapshot restored into another layout,
// or a damaged one, fails with a reason and leaves no QEMU behind.
func TestRestoreRefuses(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	drv := New(Options{Binary: env.qemu})
	m, err := drv.Start(ctx, vmConfig(t, env, "refuse-src"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(m) })
	say(t, ctx, m, "hello")
	snap := t.TempDir()
	if err := m.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	stopVM(m)

	bigger := vmConfig(t, env, "refuse-mem")
	bigger.MemoryMiB = 512
	if _, err := drv.Restore(ctx, bigger, snap); err == nil || !strings.Contains(err.Error(), "laid out") {
		t.Errorf("restore into 512 MiB: err = %v, want a layout mismatch", err)
	}

	damaged := t.TempDir()
	b, err := os.ReadFile(filepath.Join(snap, layoutFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(damaged, layoutFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	state, err := os.ReadFile(filepath.Join(snap, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(damaged, stateFile), state[:len(state)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := vmConfig(t, env, "refuse-cut")
	if _, err := drv.Restore(ctx, cfg, damaged); err == nil {
		t.Error("restore of a truncated snapshot succeeded")
	} else {
		t.Logf("truncated snapshot: %v", err)
	}
	assertNoVMFiles(t, cfg.Dir)

	// A BeforeResume that fails (the caller's check of the snapshot's
	// files) fails the restore and ends the loaded QEMU.
	gated := vmConfig(t, env, "refuse-gate")
	errMismatch := errors.New("files do not match")
	pid := 0
	gated.BeforeResume = func(context.Context) error {
		pid, _ = vmmproc.ReadPID(gated.Dir, pidFile)
		return errMismatch
	}
	if _, err := drv.Restore(ctx, gated, snap); !errors.Is(err, errMismatch) {
		t.Errorf("restore refused by BeforeResume: err = %v, want %v", err, errMismatch)
	}
	if pid == 0 {
		t.Fatal("BeforeResume ran without a QEMU's pid file")
	}
	assertNoVMFiles(t, gated.Dir)
	gone := false
	for range 100 {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			gone = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !gone {
		t.Errorf("QEMU %d still runs after BeforeResume refused its restore", pid)
	}
}

func assertNoVMFiles(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{agentSocket, qmpSocket, pidFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s left after a failed restore (%v)", f, err)
		}
	}
}

// TestFileMemorySnapshot snapshots a VM whose RAM is a shared file: the
// stream leaves the RAM out and the file goes with the snapshot; the VM
// cannot run again; two concurrent restores each count on from the
// snapshot on their own, so each maps the file privately, and the file
// is unchanged by them; and a restore's own snapshot splits its RAM into
// a file of its own, runs on, and restores into an ordinary VM.
func TestFileMemorySnapshot(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	drv := New(Options{Binary: env.qemu})

	src := vmConfig(t, env, "filemem-src")
	src.FileMemory = true
	m := startCounting(t, ctx, drv, src)
	// The snapshot's directory sits beside the VM's, as a template's does.
	snap := filepath.Join(filepath.Dir(src.Dir), "snap")
	if err := os.Mkdir(snap, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := m.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	assertRAMInFile(t, snap)
	if err := m.Resume(ctx); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("resume after the snapshot took its memory: %v, want a conflict", err)
	}
	stopVM(m)
	before := fileDigest(t, filepath.Join(snap, memoryFile))

	machines := restoreAtOnce(t, ctx, drv, snap, vmConfig(t, env, "filemem-a"), vmConfig(t, env, "filemem-b"))
	if r := say(t, ctx, machines[0], "incr"); r != "count 3" {
		t.Fatalf("restore a: %q, want count 3", r)
	}
	if r := say(t, ctx, machines[0], "incr"); r != "count 4" {
		t.Fatalf("restore a: %q, want count 4", r)
	}
	if r := say(t, ctx, machines[1], "incr"); r != "count 3" {
		t.Fatalf("restore b saw restore a's writes: %q, want count 3", r)
	}
	if after := fileDigest(t, filepath.Join(snap, memoryFile)); after != before {
		t.Fatal("the restores wrote to the snapshot's memory file")
	}

	// A restore is not FileMemory: its RAM is split out of its snapshot's
	// stream into a file of the snapshot's own, and it runs on.
	snap2 := t.TempDir()
	if err := machines[0].Snapshot(ctx, snap2); err != nil {
		t.Fatal(err)
	}
	assertSplit(t, snap2)
	if after := fileDigest(t, filepath.Join(snap, memoryFile)); after != before {
		t.Fatal("a restore's snapshot wrote to the snapshot's memory file it maps")
	}
	if err := machines[0].Resume(ctx); err != nil {
		t.Fatalf("resume after a split snapshot: %v", err)
	}
	if r := say(t, ctx, machines[0], "incr"); r != "count 5" {
		t.Fatalf("restore a after its snapshot: %q, want count 5", r)
	}
	again, err := drv.Restore(ctx, vmConfig(t, env, "filemem-again"), snap2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(again) })
	if r := say(t, ctx, again, "incr"); r != "count 5" {
		t.Errorf("restore of a restore: %q, want count 5", r)
	}

	// A FileMemory restore writes through to a copy of the file, in its
	// own directory, so its snapshot is again one whose RAM is a file.
	wcfg := vmConfig(t, env, "filemem-write")
	wcfg.FileMemory = true
	w, err := drv.Restore(ctx, wcfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(w) })
	if r := say(t, ctx, w, "incr"); r != "count 3" {
		t.Fatalf("file-memory restore: %q, want count 3", r)
	}
	snap3 := filepath.Join(filepath.Dir(wcfg.Dir), "snap3")
	if err := os.Mkdir(snap3, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := w.Snapshot(ctx, snap3); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(snap3, stateFile)); err != nil || st.Size() > 8<<20 {
		t.Fatalf("file-memory restore's snapshot stream: %v, want one without RAM", err)
	}
	if after := fileDigest(t, filepath.Join(snap, memoryFile)); after != before {
		t.Fatal("a file-memory restore wrote to its snapshot's memory file")
	}
	third, err := drv.Restore(ctx, vmConfig(t, env, "filemem-third"), snap3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopVM(third) })
	if r := say(t, ctx, third, "incr"); r != "count 4" {
		t.Errorf("restore of a file-memory restore: %q, want count 4", r)
	}
}

// assertRAMInFile fails unless the snapshot in dir has its RAM in a
// memory file of a 256 MiB guest, and not in its stream.
func assertRAMInFile(t *testing.T, dir string) os.FileInfo {
	t.Helper()
	if l := readLayout(t, dir); !l.FileMemory {
		t.Errorf("snapshot layout %+v: RAM not in a file", l)
	}
	state, err := os.Stat(filepath.Join(dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Stat(filepath.Join(dir, memoryFile))
	if err != nil {
		t.Fatal(err)
	}
	if state.Size() > 8<<20 || mem.Size() != 256<<20 {
		t.Fatalf("snapshot stream %d bytes, memory file %d bytes; want the RAM in the file only", state.Size(), mem.Size())
	}
	return mem
}

// assertSplit is assertRAMInFile for the snapshot of a VM whose RAM was
// not a shared file, whose memory file the split wrote without its zero
// pages.
func assertSplit(t *testing.T, dir string) {
	t.Helper()
	mem := assertRAMInFile(t, dir)
	if st, ok := mem.Sys().(*syscall.Stat_t); ok && st.Blocks*512 >= mem.Size() {
		t.Errorf("memory file holds %d bytes of %d: zero pages were written", st.Blocks*512, mem.Size())
	}
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestSnapshotSplitFallsBack takes a snapshot whose stream splitRAM cannot
// rewrite (compressed pages): the failed migration is run again whole,
// the RAM stays in the stream, and the VM runs on.
func TestSnapshotSplitFallsBack(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	drv := New(Options{Binary: env.qemu})
	m := startCounting(t, ctx, drv, vmConfig(t, env, "split-fallback"))
	q, err := m.(*Machine).QMP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	caps := []map[string]any{{"capability": "compress", "state": true}}
	err = q.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}, nil)
	q.Close()
	if err != nil {
		t.Fatal(err)
	}
	snap := t.TempDir()
	if err := m.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if l := readLayout(t, snap); l.FileMemory {
		t.Errorf("layout %+v: RAM in a file", l)
	}
	if _, err := os.Stat(filepath.Join(snap, memoryFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a snapshot left whole has a memory file: %v", err)
	}
	if st, err := os.Stat(filepath.Join(snap, stateFile)); err != nil || st.Size() < 1<<20 {
		t.Errorf("stream: %v, want one holding the RAM", err)
	}
	if err := m.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if r := say(t, ctx, m, "incr"); r != "count 3" {
		t.Errorf("after the snapshot: %q, want count 3", r)
	}
}
