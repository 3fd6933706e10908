package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
)

// Snapshots. A snapshot is QEMU's migration stream written to a file,
// plus the layout of the VM that wrote it:
//
//	vmstate      the migration stream: RAM (zero pages as flags only) and
//	             every device's state
//	layout.json  what a restoring QEMU must reproduce (machine, CPUs,
//	             memory, accelerator, disks and NICs), checked by Restore
//
// QEMU runs sandboxed (no exec: URIs) and, as root, as "nobody" (it cannot
// open root's files), so the daemon opens the file and hands QEMU the
// descriptor over QMP (getfd, SCM_RIGHTS); the migration URI is fd:NAME on
// both sides.
//
// Of QEMU 7.2's migration capabilities none makes a file snapshot smaller
// or faster here: mapped-ram (a seekable, fixed-offset file format) came
// in 9.0; multifd needs socket channels; compress trades a few MB for a
// lot of CPU on a 2-core host; xbzrle and postcopy serve live migration;
// x-ignore-shared skips shared-memory RAM, which would make every restore
// of one snapshot write into the same memory file. What matters is the
// bandwidth limit: QEMU throttles migration to 32 MiB/s by default, which
// for a ~94 MB stream is three seconds of sleeping, so it is lifted. The
// events capability lets us wait for completion without polling.
const (
	stateFile  = "vmstate"
	layoutFile = "layout.json"
	// memoryFile is a FileMemory VM's RAM, in its directory and in its
	// snapshots'.
	memoryFile = "memory"
	// snapshotFD is the name under which QEMU holds the stream's descriptor.
	snapshotFD = "husk-snapshot"
	// unlimitedBandwidth is QEMU's max-bandwidth in bytes/s: far above
	// any disk, well below QEMU's own upper bound.
	unlimitedBandwidth = 1 << 40
	// splitPipeSize is the pipe a split snapshot's stream goes through.
	splitPipeSize = 1 << 20
	// splitTailTimeout bounds the wait for a split snapshot's stream to
	// end once QEMU reports the migration done.
	splitTailTimeout = 10 * time.Second
)

// layout is what must be equal between a snapshotted VM and its restore:
// QEMU's migration stream carries state, not configuration, and a device
// or memory size that differs fails the load (or worse).
type layout struct {
	Machine   string       `json:"machine"`
	Accel     string       `json:"accel"`
	MemoryMiB int          `json:"memoryMiB"`
	CPUs      int          `json:"cpus"`
	Disks     []layoutDisk `json:"disks"`
	Nets      int          `json:"nets"`
	// NICs are the Nets NICs in slot order. Layouts written before NICs
	// could be hot-plugged lack them; their NICs fill the first slots.
	NICs []layoutNIC `json:"nics,omitempty"`
	// Slots is the PCI slot plan the devices follow (pciSlotPlan on
	// Q35, 0 on microvm): snapshots made before devices had fixed
	// slots do not fit a VM that has them.
	Slots int `json:"slots,omitempty"`
	// FileMemory, of a running VM: its RAM is the shared file memoryFile
	// (vmm.Config.FileMemory), so its snapshots carry that file and no
	// RAM in their stream. Of a snapshot: its RAM is memoryFile, whether
	// the VM's own or split out of its stream (ramsplit.go). It is not
	// compared by equal: a restore of such a snapshot maps the file
	// privately and is not FileMemory itself.
	FileMemory bool `json:"fileMemory,omitempty"`
	// CPU is the -cpu model the guest booted on, which its restores get
	// whatever the driver's current model: the guest's kernel chose its
	// code paths by that CPU's features. Layouts written before it was
	// recorded are of TCG guests on cpuTCGLegacy (or KVM guests on host).
	CPU string `json:"cpu,omitempty"`
	// Firmware is the -bios file the VM booted with ("" QEMU's default,
	// which layouts written before it was recorded all had); its ROM is
	// migrated state, so restores boot the same.
	Firmware string `json:"firmware,omitempty"`
}

// cpu is the CPU model a restore of the layout's VM needs.
func (l layout) cpu() string {
	switch {
	case l.CPU != "":
		return l.CPU
	case l.Accel == "kvm":
		return cpuKVM
	default:
		return cpuTCGLegacy
	}
}

type layoutDisk struct {
	ReadOnly bool   `json:"readOnly"`
	Serial   string `json:"serial"`
	// Removable is a device whose medium changes while the VM runs
	// (vmm.Disk.Removable); Empty says it holds none.
	Removable bool `json:"removable,omitempty"`
	Empty     bool `json:"empty,omitempty"`
	// Medium is the block node AttachDisks added for a medium it inserted,
	// which DetachDisks deletes; "" when the medium came with the command
	// line (a restore's), which leaves with the device's backend. It is
	// not migrated state and equal ignores it.
	Medium string `json:"medium,omitempty"`
}

// migrated is the part of a disk the migration stream depends on.
func (d layoutDisk) migrated() layoutDisk {
	d.Medium = ""
	return d
}

// layoutNIC is one NIC: its slot behind the NIC bridge, and the
// MAC the host gave it, by which RemoveNIC finds it.
type layoutNIC struct {
	Slot int    `json:"slot"`
	MAC  string `json:"mac"`
}

// netSlots are the slots of the layout's NICs, in order.
func (l layout) netSlots() []int {
	if l.NICs == nil {
		return denseSlots(l.Nets)
	}
	out := make([]int, len(l.NICs))
	for i, n := range l.NICs {
		out[i] = n.Slot
	}
	return out
}

// denseSlots are the slots of n NICs a VM booted with.
func denseSlots(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// layoutOf is the layout of a VM started for cfg with cfg.Nets in
// netSlots (nil: the first slots).
func (d *Driver) layoutOf(cfg vmm.Config, netSlots []int) layout {
	l := layout{Machine: d.machine, Accel: cfg.Accel, MemoryMiB: memoryMiB(cfg), CPUs: max(cfg.CPUs, 1), Nets: len(cfg.Nets), FileMemory: cfg.FileMemory}
	if netSlots == nil {
		netSlots = denseSlots(len(cfg.Nets))
	}
	for i, n := range cfg.Nets {
		if i < len(netSlots) {
			l.NICs = append(l.NICs, layoutNIC{Slot: netSlots[i], MAC: n.MAC})
		}
	}
	if d.machine == MachineQ35 {
		l.Slots = pciSlotPlan
	}
	if l.Accel == "" {
		l.Accel = "tcg"
	}
	for _, disk := range cfg.Disks {
		l.Disks = append(l.Disks, layoutDisk{ReadOnly: disk.ReadOnly, Serial: disk.Serial, Removable: disk.Removable, Empty: disk.Path == ""})
	}
	return l
}

// equal compares what the migration stream depends on. NIC slots are not
// compared: a restore takes them from the snapshot's layout.
func (l layout) equal(o layout) bool {
	return l.Machine == o.Machine && l.Accel == o.Accel && l.MemoryMiB == o.MemoryMiB &&
		l.CPUs == o.CPUs && l.Nets == o.Nets && l.Slots == o.Slots &&
		slices.EqualFunc(l.Disks, o.Disks, func(a, b layoutDisk) bool { return a.migrated() == b.migrated() })
}

// Snapshot implements vmm.Machine. The VM is paused first if it is not
// (pausing is idempotent) and stays paused afterwards. The stream is
// fsynced before Snapshot returns. A VM whose RAM is not a shared file
// has it split out of the stream into a memory file of the snapshot's
// (ramsplit.go), so that either kind restores by mapping a file.
func (m *Machine) Snapshot(ctx context.Context, dir string) (err error) {
	if m.layout == nil {
		return fmt.Errorf("snapshot qemu %d: its layout is unknown (a VM reattached after a daemon restart): %w", m.pid, errdefs.ErrNotImplemented)
	}
	l := *m.layout
	q, err := m.QMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	if err := q.Execute(ctx, "stop", nil, nil); err != nil {
		return fmt.Errorf("pause qemu %d: %w", m.pid, err)
	}
	if err := q.Execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": unlimitedBandwidth}, nil); err != nil {
		return err
	}
	start := time.Now()
	if l.FileMemory {
		err = m.snapshotStream(ctx, q, dir, true)
	} else {
		var stats splitStats
		stats, err = m.snapshotSplit(ctx, q, dir, l)
		switch {
		case err == nil:
			l.FileMemory = true
			m.log.Debug("snapshot RAM split into a file", "pages", stats.pages, "zero_pages", stats.zeroPages)
		case errors.Is(err, errNotSplittable):
			// The stream is still good whole.
			m.log.Warn("snapshot RAM stays in the stream", "err", err)
			err = m.snapshotStream(ctx, q, dir, false)
		}
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("encode vm layout: %w", err)
	}
	if err := vmmproc.WriteFileAtomic(filepath.Join(dir, layoutFile), b); err != nil {
		return err
	}
	if st, err := os.Stat(filepath.Join(dir, stateFile)); err == nil {
		m.log.Debug("snapshot written", "bytes", st.Size(), "took", time.Since(start))
	}
	return nil
}

// snapshotStream migrates the paused VM into dir's stream file, leaving
// its RAM out if it is a shared file (ignoreShared), which then goes with
// the snapshot.
func (m *Machine) snapshotStream(ctx context.Context, q *QMP, dir string, ignoreShared bool) (err error) {
	f, err := os.OpenFile(filepath.Join(dir, stateFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create snapshot file: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close snapshot file: %w", cerr)
		}
	}()
	if err := m.migrate(ctx, q, f, ignoreShared); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync snapshot file: %w", err)
	}
	if ignoreShared {
		return m.keepMemory(dir)
	}
	return nil
}

// snapshotSplit migrates the paused VM through a pipe into splitRAM, which
// writes dir's stream and memory file. A stream splitRAM cannot rewrite
// fails the migration and is errNotSplittable; the VM and dir are then as
// they were.
func (m *Machine) snapshotSplit(ctx context.Context, q *QMP, dir string, l layout) (_ splitStats, err error) {
	ramSize := int64(l.MemoryMiB) << 20
	statePath, memPath := filepath.Join(dir, stateFile), filepath.Join(dir, memoryFile)
	state, err := os.OpenFile(statePath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return splitStats{}, fmt.Errorf("create snapshot file: %w", err)
	}
	defer state.Close()
	defer func() {
		if errors.Is(err, errNotSplittable) {
			for _, p := range []string{statePath, memPath} {
				if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
					err = fmt.Errorf("snapshot qemu %d: %w", m.pid, rerr)
				}
			}
		}
	}()
	if err := createMemoryFile(memPath, l.MemoryMiB); err != nil {
		return splitStats{}, err
	}
	mem, err := os.OpenFile(memPath, os.O_RDWR, 0)
	if err != nil {
		return splitStats{}, fmt.Errorf("open snapshot memory file: %w", err)
	}
	defer mem.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return splitStats{}, fmt.Errorf("snapshot pipe: %w", err)
	}
	// A pipe holds 64 KiB by default, and QEMU and the splitter would
	// take turns at that size. Larger is best effort (fs.pipe-max-size).
	_, _ = unix.FcntlInt(pw.Fd(), unix.F_SETPIPE_SZ, splitPipeSize)
	type result struct {
		stats splitStats
		err   error
	}
	done := make(chan result, 1)
	go func() {
		stats, err := splitRAM(pr, state, mem, defaultRAMID(l.Machine), ramSize)
		// Closing the read end also fails a migration still writing.
		pr.Close()
		done <- result{stats, err}
	}()
	migErr := m.migrate(ctx, q, pw, false)
	// QEMU holds its own copy of the write end; the splitter sees the
	// stream's end when QEMU closes it after the migration.
	pw.Close()
	// QEMU closes its end once the migration is over, and the splitter
	// then has at most what the pipe held left to read: a splitter still
	// waiting well after that would wait for ever.
	tail := time.NewTimer(splitTailTimeout)
	defer tail.Stop()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		pr.Close()
		res = <-done
	case <-tail.C:
		pr.Close()
		if res = <-done; res.err != nil {
			res.err = fmt.Errorf("the stream did not end %v after the migration: %w", splitTailTimeout, res.err)
		}
	}
	switch {
	case errors.Is(res.err, errNotSplittable):
		return res.stats, fmt.Errorf("snapshot qemu %d: %w", m.pid, res.err)
	case migErr != nil:
		return res.stats, migErr
	case res.err != nil:
		return res.stats, fmt.Errorf("snapshot qemu %d: split RAM: %w", m.pid, res.err)
	}
	if err := mem.Sync(); err != nil {
		return res.stats, fmt.Errorf("sync snapshot memory file: %w", err)
	}
	if err := state.Sync(); err != nil {
		return res.stats, fmt.Errorf("sync snapshot file: %w", err)
	}
	return res.stats, state.Close()
}

// migrate runs a migration of the paused VM into f and waits for it.
func (m *Machine) migrate(ctx context.Context, q *QMP, f *os.File, ignoreShared bool) error {
	if err := prepareMigration(ctx, q, ignoreShared); err != nil {
		return err
	}
	if err := q.ExecuteWithFile(ctx, "getfd", map[string]string{"fdname": snapshotFD}, nil, f); err != nil {
		return fmt.Errorf("pass snapshot file to qemu %d: %w", m.pid, err)
	}
	if err := q.Execute(ctx, "migrate", map[string]string{"uri": "fd:" + snapshotFD}, nil); err != nil {
		_ = q.Execute(context.WithoutCancel(ctx), "closefd", map[string]string{"fdname": snapshotFD}, nil)
		return fmt.Errorf("snapshot qemu %d: %w", m.pid, err)
	}
	if err := waitMigration(ctx, q); err != nil {
		// A migration that outlives us would keep writing into a file
		// the caller is about to remove.
		_ = q.Execute(context.WithoutCancel(ctx), "migrate_cancel", nil, nil)
		return fmt.Errorf("snapshot qemu %d: %w", m.pid, err)
	}
	return nil
}

// keepMemory puts a paused FileMemory VM's RAM file, synced, into the
// snapshot directory dir. It is linked, not copied: the VM never runs
// again (Resume refuses), so the file no longer changes.
func (m *Machine) keepMemory(dir string) error {
	src := m.path(memoryFile)
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open vm memory file: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync vm memory file: %w", err)
	}
	if err := os.Link(src, filepath.Join(dir, memoryFile)); err != nil {
		return fmt.Errorf("keep vm memory file with its snapshot (it must be on the VM directory's file system): %w", err)
	}
	m.mu.Lock()
	m.ramTaken = true
	m.mu.Unlock()
	return nil
}

// prepareMigration turns on migration events, which waitMigration reads,
// and with ignoreShared leaves shared RAM (a FileMemory VM's) out of the
// stream. Both ends of a stream must agree on ignoreShared: it changes
// the stream's format.
func prepareMigration(ctx context.Context, q *QMP, ignoreShared bool) error {
	caps := []map[string]any{{"capability": "events", "state": true}, {"capability": "x-ignore-shared", "state": ignoreShared}}
	if err := q.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}, nil); err != nil {
		return err
	}
	return nil
}

// waitMigration waits for the migration under way to end and reports how.
// Events that arrived while earlier commands ran are queued by q, so none
// is missed between starting the migration and this call.
func waitMigration(ctx context.Context, q *QMP) error {
	for {
		ev, err := q.NextEvent(ctx)
		if err != nil {
			return fmt.Errorf("wait for migration: %w", err)
		}
		if ev.Event != "MIGRATION" {
			continue
		}
		var data struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			return fmt.Errorf("decode migration event: %w", err)
		}
		switch data.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			var info struct {
				ErrorDesc string `json:"error-desc"`
			}
			if err := q.Execute(ctx, "query-migrate", nil, &info); err != nil {
				info.ErrorDesc = err.Error()
			}
			if info.ErrorDesc == "" {
				info.ErrorDesc = "no reason given"
			}
			return fmt.Errorf("migration %s: %s", data.Status, info.ErrorDesc)
		}
	}
}

// Resume implements vmm.Machine through QMP cont. A snapshot left under
// way (its daemon died mid-checkpoint) is cancelled first: resuming under
// a running migration would let the guest change memory already written.
func (m *Machine) Resume(ctx context.Context) error {
	m.mu.Lock()
	taken := m.ramTaken
	m.mu.Unlock()
	if taken {
		return fmt.Errorf("qemu %d: its memory file now belongs to a snapshot; the VM cannot run again: %w", m.pid, errdefs.ErrConflict)
	}
	q, err := m.QMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	for cancelled := false; ; {
		var info struct {
			Status string `json:"status"`
		}
		if err := q.Execute(ctx, "query-migrate", nil, &info); err != nil {
			return fmt.Errorf("qemu %d: %w", m.pid, err)
		}
		if !migrationActive(info.Status) {
			break
		}
		if !cancelled {
			if err := q.Execute(ctx, "migrate_cancel", nil, nil); err != nil {
				return fmt.Errorf("qemu %d: cancel snapshot: %w", m.pid, err)
			}
			cancelled = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("qemu %d: wait for snapshot to cancel: %w", m.pid, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	unattended, err := agentUnattended(ctx, q)
	if err != nil {
		return fmt.Errorf("qemu %d: %w", m.pid, err)
	}
	if unattended {
		if err := m.dialAgentEarly(ctx, q); err != nil {
			return err
		}
	}
	if err := q.Execute(ctx, "cont", nil, nil); err != nil {
		return fmt.Errorf("qemu %d cont: %w", m.pid, err)
	}
	return nil
}

func migrationActive(status string) bool {
	switch status {
	case "setup", "active", "pre-switchover", "device", "cancelling", "wait-unplug":
		return true
	}
	return false
}

// Restore implements vmm.Driver: a QEMU with cfg's devices waits for an
// incoming migration (-incoming defer), reads snapshotDir's stream
// through a descriptor the daemon opened, and is resumed. The snapshot is
// only read, so any number of restores may share it.
func (d *Driver) Restore(ctx context.Context, cfg vmm.Config, snapshotDir string) (_ vmm.Machine, err error) {
	b, err := os.ReadFile(filepath.Join(snapshotDir, layoutFile))
	if err != nil {
		return nil, fmt.Errorf("restore vm %s: read snapshot layout: %w", cfg.ID, err)
	}
	var want layout
	if err := json.Unmarshal(b, &want); err != nil {
		return nil, fmt.Errorf("restore vm %s: decode snapshot layout: %w", cfg.ID, err)
	}
	// Like NIC slots, which disks are removable is the snapshot's to say:
	// a container's checkpoint restores its disks as the VM it was taken
	// of had them, whether that VM booted with them or took them into a
	// template's empty devices.
	cfg.Disks = slices.Clone(cfg.Disks)
	for i := range cfg.Disks {
		if i < len(want.Disks) && want.Disks[i].Removable {
			cfg.Disks[i].Removable = true
		}
	}
	if got := d.layoutOf(cfg, nil); !got.equal(want) {
		return nil, fmt.Errorf("restore vm %s: the snapshot was taken of a VM laid out as %+v, not %+v: %w",
			cfg.ID, want, got, errdefs.ErrInvalidArgument)
	}
	f, err := os.Open(filepath.Join(snapshotDir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("restore vm %s: open snapshot: %w", cfg.ID, err)
	}
	defer f.Close()

	// A FileMemory snapshot's RAM is its file, mapped copy-on-write
	// (share=off): the stream holds none, nothing is read up front, and
	// the file is never written. A FileMemory restore writes through to a
	// copy of it instead, so that its own snapshots carry RAM as a file.
	var mem memorySpec
	switch {
	case want.FileMemory:
		if mem.path, err = filepath.Abs(filepath.Join(snapshotDir, memoryFile)); err != nil {
			return nil, fmt.Errorf("restore vm %s: %w", cfg.ID, err)
		}
		if _, err := os.Stat(mem.path); err != nil {
			return nil, fmt.Errorf("restore vm %s: snapshot memory: %w", cfg.ID, err)
		}
		if cfg.FileMemory {
			mem = memorySpec{path: memoryFile, shared: true, from: mem.path}
		}
	case cfg.FileMemory:
		return nil, fmt.Errorf("restore vm %s: file-backed memory needs a snapshot whose RAM is a file: %w", cfg.ID, errdefs.ErrNotImplemented)
	}
	t0 := time.Now()
	m, err := d.launch(ctx, cfg, argSpec{netSlots: want.netSlots(), incoming: true, memory: mem, cpu: want.cpu(), firmware: want.Firmware})
	if err != nil {
		return nil, err
	}
	launched := time.Now()
	defer func() {
		if err != nil {
			_ = m.Kill()
			_ = m.Cleanup()
		}
	}()
	q, err := m.QMP(ctx)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	if err := prepareMigration(ctx, q, want.FileMemory); err != nil {
		return nil, fmt.Errorf("restore vm %s: %w", cfg.ID, err)
	}
	if err := q.ExecuteWithFile(ctx, "getfd", map[string]string{"fdname": snapshotFD}, nil, f); err != nil {
		return nil, fmt.Errorf("restore vm %s: pass snapshot to qemu: %w", cfg.ID, err)
	}
	if err := q.Execute(ctx, "migrate-incoming", map[string]string{"uri": "fd:" + snapshotFD}, nil); err != nil {
		return nil, fmt.Errorf("restore vm %s: %w", cfg.ID, err)
	}
	if err := waitMigration(ctx, q); err != nil {
		// A stream QEMU cannot load makes it exit; its own words say why.
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("restore vm %s: %w", cfg.ID, err)
		}
		waitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if m.Wait(waitCtx) == nil {
			return nil, fmt.Errorf("restore vm %s: qemu could not load the snapshot: %s", cfg.ID, vmmproc.OutputTail(filepath.Join(m.dir, outputLog)))
		}
		return nil, fmt.Errorf("restore vm %s: %w", cfg.ID, err)
	}
	loaded := time.Now()
	if cfg.BeforeResume != nil {
		if err := cfg.BeforeResume(ctx); err != nil {
			return nil, fmt.Errorf("restore vm %s: %w", cfg.ID, err)
		}
	}
	if err := m.dialAgentEarly(ctx, q); err != nil {
		return nil, fmt.Errorf("restore vm %s: %w", cfg.ID, err)
	}
	if err := q.Execute(ctx, "cont", nil, nil); err != nil {
		return nil, fmt.Errorf("restore vm %s: resume: %w", cfg.ID, err)
	}
	d.log.Debug("qemu restored", "vm", cfg.ID, "launch", launched.Sub(t0), "load", loaded.Sub(launched), "resume", time.Since(loaded))
	return m, nil
}
