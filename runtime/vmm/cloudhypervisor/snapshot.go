package cloudhypervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
)

// Files of a snapshot directory. cloud-hypervisor writes config.json,
// state.json and memory-ranges; the driver adds its own record.
const (
	snapshotConfig = "config.json"
	// MetadataFile is husk's record beside cloud-hypervisor's files.
	MetadataFile = "husk-snapshot.json"
)

// Metadata is what a snapshot records about where it was taken: a
// restore needs the same cloud-hypervisor build (its state format is not
// stable across releases) and the same kernel (the memory image holds it).
type Metadata struct {
	VMM          string    `json:"vmm"`
	VMMVersion   string    `json:"vmm_version"`
	KernelSHA256 string    `json:"kernel_sha256"`
	Created      time.Time `json:"created"`
}

// Snapshot implements vmm.Machine: vm.snapshot to file://dir, then the
// metadata file. The VM must be paused and stays paused.
func (m *Machine) Snapshot(ctx context.Context, dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("snapshot dir: %w", err)
	}
	info, err := m.Info(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if info.State != StatePaused {
		return fmt.Errorf("snapshot: vm is %s, not paused: %w", info.State, errdefs.ErrFailedPrecondition)
	}
	// The version of the running process, which may differ from the
	// binary's if it was replaced since the VM started.
	ping, err := m.Ping(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	build := ping.BuildVersion
	if build == "" {
		build = ping.Version
	}
	digest, err := fileSHA256(info.Config.Payload.Kernel)
	if err != nil {
		return fmt.Errorf("snapshot: kernel digest: %w", err)
	}
	if err := m.api.put(ctx, "vm.snapshot", &VmSnapshotConfig{DestinationURL: "file://" + dir}); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	md := Metadata{VMM: Name, VMMVersion: versionString(build), KernelSHA256: digest, Created: time.Now().UTC()}
	b, err := json.MarshalIndent(md, "", "  ")
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := vmmproc.WriteFileAtomic(filepath.Join(dir, MetadataFile), append(b, '\n')); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ReadMetadata reads the record Snapshot left in dir.
func ReadMetadata(dir string) (Metadata, error) {
	var md Metadata
	b, err := os.ReadFile(filepath.Join(dir, MetadataFile))
	if errors.Is(err, os.ErrNotExist) {
		return md, fmt.Errorf("%s has no %s: not a husk cloud-hypervisor snapshot: %w", dir, MetadataFile, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return md, err
	}
	if err := json.Unmarshal(b, &md); err != nil {
		return md, fmt.Errorf("read %s: %w", filepath.Join(dir, MetadataFile), err)
	}
	return md, nil
}

// Restore implements vmm.Driver. Before anything is created it checks
// that the snapshot was taken by this cloud-hypervisor version with this
// kernel and that cfg matches its devices; a mismatch is an error wrapping
// errdefs.ErrFailedPrecondition (or ErrInvalidArgument) and leaves
// nothing behind. It then writes a private copy of the snapshot in
// cfg.Dir/restore (config.json rewritten for the new VM, the other files
// linked), starts a fresh cloud-hypervisor, and restores and resumes the
// VM from that copy with vm.restore. snapshotDir is only read.
func (d *Driver) Restore(ctx context.Context, cfg vmm.Config, snapshotDir string) (vmm.Machine, error) {
	if err := validate(cfg); err != nil {
		return nil, err
	}
	if cfg.FileMemory {
		return nil, fmt.Errorf("restore vm %s: file-backed memory: %w", cfg.ID, errdefs.ErrNotImplemented)
	}
	snapshotDir, err := filepath.Abs(snapshotDir)
	if err != nil {
		return nil, fmt.Errorf("snapshot dir: %w", err)
	}
	fail := func(err error) (vmm.Machine, error) {
		return nil, fmt.Errorf("restore vm %s from %s: %w", cfg.ID, snapshotDir, err)
	}
	md, err := ReadMetadata(snapshotDir)
	if err != nil {
		return fail(err)
	}
	version, err := d.Version(ctx)
	if err != nil {
		return fail(err)
	}
	if md.VMMVersion != version {
		return fail(fmt.Errorf("snapshot was taken with %s, this is %s: %w", md.VMMVersion, version, errdefs.ErrFailedPrecondition))
	}
	digest, err := fileSHA256(cfg.Kernel)
	if err != nil {
		return fail(fmt.Errorf("kernel digest: %w", err))
	}
	if md.KernelSHA256 != digest {
		return fail(fmt.Errorf("snapshot was taken with kernel sha256:%s, %s is sha256:%s: %w",
			md.KernelSHA256, cfg.Kernel, digest, errdefs.ErrFailedPrecondition))
	}
	raw, err := os.ReadFile(filepath.Join(snapshotDir, snapshotConfig))
	if err != nil {
		return fail(err)
	}
	vc, err := d.vmConfig(cfg)
	if err != nil {
		return fail(err)
	}
	rewritten, err := RewriteConfig(raw, vc)
	if err != nil {
		return fail(err)
	}

	m, err := d.launch(ctx, cfg.ID, cfg.Dir)
	if err != nil {
		return fail(err)
	}
	src := filepath.Join(m.dir, restoreDir)
	err = writeRestoreDir(src, snapshotDir, rewritten)
	if err == nil {
		mode := RestoreCopy
		if d.opts.RestoreMode == RestoreModeOnDemand {
			mode = RestoreOnDemand
		}
		err = m.api.put(ctx, "vm.restore", &RestoreConfig{SourceURL: "file://" + src, MemoryRestoreMode: mode, Resume: cfg.BeforeResume == nil})
	}
	if err == nil && cfg.BeforeResume != nil {
		err = cfg.BeforeResume(ctx)
	}
	if err == nil {
		// Releases that ignore "resume" leave the VM paused.
		err = m.Resume(ctx)
	}
	if err != nil {
		tail := vmmproc.OutputTail(filepath.Join(m.dir, outputLog))
		m.abort()
		// Nothing of this attempt stays: not even the VMM's log, whose
		// end the error carries.
		os.Remove(filepath.Join(m.dir, outputLog))
		os.Remove(filepath.Join(m.dir, consoleLog))
		return fail(fmt.Errorf("%w (cloud-hypervisor output: %s)", err, tail))
	}
	return m, nil
}

// writeRestoreDir makes dir a view of snapshotDir in which only
// config.json differs: the other files are symbolic links, so the memory
// image is neither copied nor written.
func writeRestoreDir(dir, snapshotDir string, config []byte) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create restore dir: %w", err)
	}
	entries, err := os.ReadDir(snapshotDir)
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	for _, e := range entries {
		if e.Name() == snapshotConfig || e.Name() == MetadataFile {
			continue
		}
		if err := os.Symlink(filepath.Join(snapshotDir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("link snapshot file: %w", err)
		}
	}
	return vmmproc.WriteFileAtomic(filepath.Join(dir, snapshotConfig), config)
}

// RewriteConfig returns a snapshot's config.json (raw) with what differs
// for the new VM taken from vc: the payload's kernel and initramfs, each
// disk's path, each network device's TAP (any file descriptors recorded
// in it dropped), the vsock socket and the serial file. Everything else,
// including fields this package does not know, is kept. The snapshot
// must have as many disks and network devices as vc.
func RewriteConfig(raw []byte, vc *VmConfig) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parse snapshot %s: %w", snapshotConfig, err)
	}
	obj := func(parent map[string]any, key string) (map[string]any, error) {
		v, ok := parent[key].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("snapshot %s has no %q object: %w", snapshotConfig, key, errdefs.ErrInvalidArgument)
		}
		return v, nil
	}
	list := func(key string, want int) ([]any, error) {
		var l []any
		if v, ok := doc[key]; ok && v != nil {
			l, ok = v.([]any)
			if !ok {
				return nil, fmt.Errorf("snapshot %s: %q is not a list: %w", snapshotConfig, key, errdefs.ErrInvalidArgument)
			}
		}
		if len(l) != want {
			return nil, fmt.Errorf("snapshot has %d %s, the new vm %d: %w", len(l), key, want, errdefs.ErrInvalidArgument)
		}
		return l, nil
	}

	payload, err := obj(doc, "payload")
	if err != nil {
		return nil, err
	}
	payload["kernel"] = vc.Payload.Kernel
	payload["initramfs"] = vc.Payload.Initramfs

	disks, err := list("disks", len(vc.Disks))
	if err != nil {
		return nil, err
	}
	for i, v := range disks {
		dk, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("snapshot disk %d is not an object: %w", i, errdefs.ErrInvalidArgument)
		}
		if ro, _ := dk["readonly"].(bool); ro != vc.Disks[i].Readonly {
			return nil, fmt.Errorf("snapshot disk %d readonly=%t, the new vm's %t: %w", i, ro, vc.Disks[i].Readonly, errdefs.ErrInvalidArgument)
		}
		dk["path"] = vc.Disks[i].Path
	}
	nets, err := list("net", len(vc.Net))
	if err != nil {
		return nil, err
	}
	for i, v := range nets {
		n, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("snapshot net %d is not an object: %w", i, errdefs.ErrInvalidArgument)
		}
		n["tap"] = vc.Net[i].Tap
		delete(n, "fds")
	}
	vsock, err := obj(doc, "vsock")
	if err != nil {
		return nil, err
	}
	vsock["socket"] = vc.Vsock.Socket
	if serial, ok := doc["serial"].(map[string]any); ok && serial["mode"] == ModeFile {
		serial["file"] = vc.Serial.File
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", snapshotConfig, err)
	}
	return out, nil
}
