package templates

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/rootfs"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/proto"
)

// Image templates. A shape template's restore still mounts the
// container's root: the base ext4, the upper ext4 and the overlay. Under
// TCG that is the largest part of a template start's guest time (the
// ext4 and overlay code translated afresh in every restored VM, then
// overlay's probes of its work directory), and it is the same for every
// container of an image until the container writes anything. An image
// template is a shape template restored once more with an image's base
// disk and a fresh upper disk, its root mounted by the agent
// (proto.OpMountRoot), and snapshotted again: RAM as a file of its own
// (a copy of the shape template's that the VM wrote through to) and the
// upper disk as it was at the snapshot. A container whose upper disk is
// still as it was made (nothing has written it) starts from it: its upper
// disk is replaced by a copy of the template's, and the restored guest's
// setup finds the root mounted. Its own writes then go to its own copy,
// as they would to a fresh upper.
//
// An image template is made in the background the first time a container
// of an image starts from its shape's template, so the second container
// of that image is the first to use it. They are keyed by their shape
// template's key, the identity of the base disk's file (the image's base
// disks are written once and never changed; another file at the path, as
// when the image is removed and pulled again, is another key) and the
// upper disks' size. At most Options.ImageTemplates are kept, the least
// recently made or used removed first, and one whose base disk has gone
// (its image was removed) is removed when the Manager opens and whenever
// another is built.

// imagePrefix starts the directory names of image templates in Dir.
const imagePrefix = "img-"

// imageUpperFile is an image template's upper disk, beside its snapshot.
const imageUpperFile = "upper.ext4"

// defaultImageTemplates is Options.ImageTemplates' default: each costs
// the template's RAM file (~80 MB of data under TCG) on disk.
const defaultImageTemplates = 8

// ImageKey is what an image template fits beyond its shape.
type ImageKey struct {
	// Base is the identity of the image's base disk file.
	Base DiskFile `json:"base"`
	// UpperSize is the apparent size of the upper disks it starts.
	UpperSize int64 `json:"upperSize"`
}

// DiskFile identifies a disk image file: its path and its stamp.
type DiskFile struct {
	Path  string           `json:"path"`
	Stamp rootfs.FileStamp `json:"stamp"`
}

func diskFileOf(path string) (DiskFile, error) {
	st, err := rootfs.StampOf(path)
	return DiskFile{Path: path, Stamp: st}, err
}

// check fails when the file at f's path is gone or is no longer f: its
// image was removed, or pulled again as another file.
func (f DiskFile) check() error {
	now, err := diskFileOf(f.Path)
	switch {
	case err != nil:
		return err
	case now != f:
		return fmt.Errorf("disk %s changed", f.Path)
	}
	return nil
}

// dirName is the directory of the template k describes with ik (nil: a
// shape template).
func dirName(k Key, ik *ImageKey) string {
	if ik == nil {
		return k.digest()
	}
	return imagePrefix + digestOf(struct {
		Key   Key      `json:"key"`
		Image ImageKey `json:"image"`
	}{k, *ik})
}

// rootDisks are cfg's base and upper disks, told apart by the serials of
// the read-only and writable slots.
func (m *Manager) rootDisks(cfg vmm.Config) (base, upper vmm.Disk, ok bool) {
	bs, us := warmSerials(m.opts.Slots, "")
	var nb, nu int
	for _, d := range cfg.Disks {
		switch d.Serial {
		case bs:
			base, nb = d, nb+1
		case us:
			upper, nu = d, nu+1
		}
	}
	return base, upper, nb == 1 && nu == 1 && len(cfg.Disks) == 2 && base.ReadOnly && !upper.ReadOnly && base.Path != "" && upper.Path != ""
}

// StartImage restores a VM shaped as cfg from the image template of its
// base disk, with its root mounted, after replacing its upper disk by a
// copy of the template's. The caller promises that the upper disk is as
// it was made: nothing has written it. Otherwise it is as Start, but for
// errdefs.ErrNotFound when no image template fits (yet), in which case
// the upper disk is untouched and one is built in the background once the
// shape's template is ready.
func (m *Manager) StartImage(ctx context.Context, cfg vmm.Config) (_ *VM, err error) {
	k, err := m.keyFor(ctx, cfg.MemoryMiB, cfg.CPUs, len(cfg.Nets))
	if err != nil {
		return nil, err
	}
	switch {
	case !m.bootsAsDaemon(cfg, k):
		return nil, errdefs.ErrNotFound.WithMessage("no image template: the VM's kernel, initramfs, command line or accelerator differ from the daemon's")
	case m.opts.Disks == nil || len(m.opts.Slots) == 0 || m.imageTemplates() == 0:
		return nil, errdefs.ErrNotFound.WithMessage("no image templates: the daemon makes none")
	}
	m.mu.Lock()
	unsupported := m.noImages
	m.mu.Unlock()
	if unsupported {
		return nil, errdefs.ErrNotFound.WithMessage("no image templates: the VMM cannot make them")
	}
	base, upper, ok := m.rootDisks(cfg)
	if !ok {
		return nil, errdefs.ErrNotFound.WithMessage("no image template: the VM's disks are not a base and an upper")
	}
	bf, err := diskFileOf(base.Path)
	if err != nil {
		return nil, fmt.Errorf("image template: %w", err)
	}
	st, err := os.Stat(upper.Path)
	if err != nil {
		return nil, fmt.Errorf("image template: %w", err)
	}
	ik := ImageKey{Base: bf, UpperSize: st.Size()}
	name := dirName(k, &ik)
	m.mu.Lock()
	md, ready := m.ready[name]
	_, pending := m.pending[name]
	failed := m.failed[name]
	shape, shapeReady := m.ready[k.digest()]
	if ready {
		md.used = time.Now()
		m.ready[name] = md
	}
	m.mu.Unlock()
	switch {
	case failed != nil:
		return nil, errdefs.ErrNotFound.WithMessage("no image template: its build failed: " + failed.Error())
	case pending:
		return nil, errdefs.ErrNotFound.WithMessage("no image template yet: being built")
	case !ready && !shapeReady:
		return nil, errdefs.ErrNotFound.WithMessage("no image template: its shape's template is not ready")
	case !ready:
		m.buildLater(name, func(ctx context.Context) (meta, error) {
			return m.buildImage(ctx, k, ik, shape, base, upper)
		})
		return nil, errdefs.ErrNotFound.WithMessage("no image template yet: building one")
	}
	dir := filepath.Join(m.opts.Dir, name)
	if err := replaceDisk(ctx, upper.Path, filepath.Join(dir, imageUpperFile)); err != nil {
		return nil, fmt.Errorf("image template: %w", err)
	}
	t0 := time.Now()
	machine, err := m.opts.Driver.Restore(ctx, cfg, filepath.Join(dir, snapshotDir))
	if err != nil {
		return nil, fmt.Errorf("restore image template: %w", err)
	}
	defer func() {
		if err != nil {
			discard(machine)
		}
	}()
	restored := time.Now()
	client, err := m.openRestored(ctx, machine, cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("restore image template: %w", err)
	}
	m.log.Debug("restored from image template", "vm", cfg.ID, "restore", restored.Sub(t0), "agent", time.Since(restored))
	return &VM{Machine: machine, Client: client, DeviceMACs: slices.Clone(md.MACs), Template: name, Slots: k.Slots}, nil
}

// replaceDisk puts a copy of src in place of the disk at path, all at
// once: a copy beside it renamed over it.
func replaceDisk(ctx context.Context, path, src string) error {
	tmp := path + ".template"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replace disk %s: %w", path, err)
	}
	if err := rootfs.CopyDisk(ctx, tmp, src); err != nil {
		return fmt.Errorf("replace disk %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("replace disk %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func (m *Manager) imageTemplates() int {
	if m.opts.ImageTemplates == 0 {
		return defaultImageTemplates
	}
	return max(m.opts.ImageTemplates, 0)
}

// buildImage restores shape's template, shaped as k, with base and a fresh
// upper disk, has the agent mount the root, and snapshots the VM into
// Dir/<dirName(k, ik)> through a build directory renamed into place.
func (m *Manager) buildImage(ctx context.Context, k Key, ik ImageKey, shape meta, base, upper vmm.Disk) (_ meta, err error) {
	name := dirName(k, &ik)
	tmp, err := os.MkdirTemp(m.opts.Dir, buildPrefix)
	if err != nil {
		return meta{}, fmt.Errorf("create image template build dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	runDir, snapDir := filepath.Join(tmp, "run"), filepath.Join(tmp, snapshotDir)
	for _, d := range []string{runDir, snapDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return meta{}, fmt.Errorf("create %s: %w", d, err)
		}
	}
	upper.Path = filepath.Join(tmp, imageUpperFile)
	if err := m.opts.Disks.NewUpper(ctx, upper.Path, ik.UpperSize); err != nil {
		return meta{}, fmt.Errorf("image template: %w", err)
	}
	nets, cleanup, err := m.buildTaps(tmp, shape.MACs)
	defer cleanup()
	if err != nil {
		return meta{}, err
	}
	vc := vmm.Config{
		ID: "template-" + strings.TrimPrefix(name, imagePrefix)[:8], Dir: runDir, Kernel: m.opts.Kernel, Initramfs: m.opts.Initramfs,
		Cmdline: m.opts.Cmdline, MemoryMiB: k.MemoryMiB, CPUs: k.CPUs, Accel: k.Accel, Nets: nets, Disks: k.Slots,
		// Its snapshot's restores map RAM as the shape template's do.
		FileMemory: true,
	}
	machine, err := m.opts.Driver.Restore(ctx, vc, filepath.Join(m.opts.Dir, k.digest(), snapshotDir))
	if errdefs.IsNotImplemented(err) {
		m.mu.Lock()
		m.noImages = true
		m.mu.Unlock()
	}
	if err != nil {
		return meta{}, fmt.Errorf("image template: restore its shape's template: %w", err)
	}
	defer discard(machine)
	att, ok := machine.(DiskAttacher)
	if !ok {
		return meta{}, fmt.Errorf("image template: %s cannot hot-plug disks: %w", m.opts.Driver.Name(), errdefs.ErrNotImplemented)
	}
	if err := att.AttachDisks(ctx, []vmm.Disk{base, upper}); err != nil {
		return meta{}, fmt.Errorf("image template: %w", err)
	}
	client, err := m.openRestored(ctx, machine, runDir)
	if err != nil {
		return meta{}, fmt.Errorf("image template: %w", err)
	}
	err = client.MountRoot(ctx, proto.MountRootSpec{BaseSerial: base.Serial, UpperSerial: upper.Serial})
	_ = client.Close()
	if err != nil {
		return meta{}, fmt.Errorf("image template: %w", err)
	}
	if err := m.snapshot(ctx, machine, snapDir); err != nil {
		return meta{}, fmt.Errorf("image template: %w", err)
	}
	// The upper disk is now as the snapshot's guest knows it: the VMM
	// flushed it when the snapshot completed and never runs again.
	discard(machine)
	cleanup()
	if err := os.RemoveAll(runDir); err != nil {
		return meta{}, fmt.Errorf("remove image template run dir: %w", err)
	}
	md := meta{Key: k, Image: &ik, MACs: shape.MACs, Created: time.Now().UTC()}
	if err := m.publish(tmp, name, md); err != nil {
		return meta{}, err
	}
	m.evictImages(name)
	return md, nil
}

// evictImages removes the image templates whose base disk has gone or
// changed (the image was removed), then the least recently made or used
// beyond Options.ImageTemplates, sparing keep (just built).
func (m *Manager) evictImages(keep string) {
	m.mu.Lock()
	bases := map[string]DiskFile{}
	for n, md := range m.ready {
		if strings.HasPrefix(n, imagePrefix) && n != keep {
			bases[n] = md.Image.Base
		}
	}
	m.mu.Unlock()
	stale := map[string]bool{}
	for n, b := range bases {
		stale[n] = b.check() != nil
	}
	m.mu.Lock()
	var names, gone []string
	for n := range bases {
		if _, ok := m.ready[n]; !ok {
			continue
		}
		if stale[n] {
			gone = append(gone, n)
			delete(m.ready, n)
			continue
		}
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return m.ready[a].lastUse().Compare(m.ready[b].lastUse()) })
	for len(names)+1 > m.imageTemplates() && len(names) > 0 {
		gone, names = append(gone, names[0]), names[1:]
		delete(m.ready, gone[len(gone)-1])
	}
	m.mu.Unlock()
	for _, n := range gone {
		m.log.Debug("removing an image template", "dir", n, "reason", "its image's disk is gone, or too many")
		if err := os.RemoveAll(filepath.Join(m.opts.Dir, n)); err != nil {
			m.log.Warn("remove image template", "dir", n, "err", err)
		}
	}
}
