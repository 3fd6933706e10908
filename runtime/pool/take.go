package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/templates"
	"github.com/husk-vm/husk/runtime/vmm"
)

// Start hands over a pooled VM shaped as cfg to be cfg's VM: its directory
// renamed to cfg.Dir (which is replaced), its spare TAPs adopted as the
// TAPs cfg.Nets name (those of endpoints the network manager attached),
// resumed, cfg.Disks hot-plugged, its NICs recorded under cfg.Nets' MACs,
// the guest's clock and RNG refreshed; the guest is not set up (the
// caller's OpSetup does that, with DeviceMACs). A replacement is restored
// in the background.
//
// It fails with errdefs.ErrNotFound, saying why, when no pooled VM fits
// (callers restore from a template or boot instead). On any error the
// pooled VM is gone and cfg's TAPs are still on their bridges.
func (p *Pool) Start(ctx context.Context, cfg vmm.Config) (_ *templates.VM, err error) {
	switch {
	case len(cfg.Shares) > 0:
		return nil, errdefs.ErrNotFound.WithMessage("pool: the VM has virtio-fs shares")
	case cfg.Kernel != p.opts.Kernel || cfg.Initramfs != p.opts.Initramfs || cfg.Cmdline != p.opts.Cmdline ||
		(cfg.Accel != "" && p.opts.Accel != "" && cfg.Accel != p.opts.Accel):
		return nil, errdefs.ErrNotFound.WithMessage("pool: the VM's kernel, initramfs, command line or accelerator differ from the daemon's")
	case len(cfg.Nets) > 0 && p.opts.Network == nil:
		return nil, errdefs.ErrNotFound.WithMessage("pool: no network manager to adopt TAPs")
	}
	s := Shape{MemoryMiB: cfg.MemoryMiB, CPUs: max(cfg.CPUs, 1), NICs: len(cfg.Nets)}
	current, err := p.opts.Templates.Template(ctx, s.MemoryMiB, s.CPUs, s.NICs)
	if err != nil {
		return nil, fmt.Errorf("pool: template of %s: %w", s, err)
	}
	e, stale, err := p.take(s, current)
	p.discardLater(stale...)
	p.wake()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.discard(e)
		}
	}()
	t0 := time.Now()
	h := e.vm.Machine.(handover) // restore checked it
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("pool: clear %s: %w", cfg.Dir, err)
	}
	if err := os.Rename(e.dir, cfg.Dir); err != nil {
		return nil, fmt.Errorf("pool: move pooled VM to %s: %w", cfg.Dir, err)
	}
	e.dir, e.moved = cfg.Dir, true
	if err := h.Relocate(cfg.Dir); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	moved := time.Now()
	// The TAPs are adopted on the host while the guest resumes, takes its
	// disks and is refreshed: neither waits for the other (the guest sends
	// nothing before its setup). The NICs' MACs are recorded after both,
	// since the disks' hot-plug also rewrites the VM's layout.
	var taps, macs []string
	for _, n := range cfg.Nets {
		taps, macs = append(taps, n.Tap), append(macs, n.MAC)
	}
	adopted := make(chan error, 1)
	var adoptTook time.Duration
	go func() {
		var err error
		if len(taps) > 0 {
			err = p.opts.Network.AdoptTaps(ctx, taps, e.spares)
		}
		adoptTook = time.Since(moved)
		adopted <- err
	}()
	resumed, attached, refreshed, err := p.wakeUp(ctx, e, h, cfg.Disks)
	if aerr := <-adopted; aerr != nil {
		return nil, fmt.Errorf("pool: %w", aerr)
	}
	if err != nil {
		return nil, err
	}
	if len(macs) > 0 {
		// From here the spares are the container's TAPs, under its names.
		if err := h.RecordNICMACs(macs); err != nil {
			return nil, fmt.Errorf("pool: %w", err)
		}
	}
	if err := os.Remove(p.recordPath(e)); err != nil && !errors.Is(err, os.ErrNotExist) {
		// A record left behind only names TAPs that are gone by those names.
		p.log.Warn("pool: remove tap record", "err", err)
	}
	p.log.Debug("taken from the pool", "vm", cfg.ID, "shape", s.String(), "move", moved.Sub(t0), "adopt", adoptTook,
		"resume", resumed.Sub(moved), "hotplug", attached.Sub(resumed), "refresh", refreshed.Sub(resumed), "took", time.Since(t0))
	vm := *e.vm
	return &vm, nil
}

// wakeUp resumes a taken VM, then plugs its container's disks (QMP) while
// the guest is refreshed (agent), saying when each step ended.
func (p *Pool) wakeUp(ctx context.Context, e *entry, h handover, disks []vmm.Disk) (resumed, attached, refreshed time.Time, err error) {
	if err = e.vm.Machine.Resume(ctx); err != nil {
		return resumed, attached, refreshed, fmt.Errorf("pool: resume: %w", err)
	}
	resumed = time.Now()
	refreshErr := make(chan error, 1)
	go func() {
		err := templates.Refresh(ctx, e.vm.Client)
		refreshed = time.Now()
		refreshErr <- err
	}()
	if len(disks) > 0 {
		err = h.AttachDisks(ctx, disks)
	}
	attached = time.Now()
	err = errors.Join(err, <-refreshErr)
	if err != nil {
		return resumed, attached, refreshed, fmt.Errorf("pool: %w", err)
	}
	return resumed, attached, refreshed, nil
}

// take removes a VM of shape s and template current from the pool,
// marking s used; it also removes (and returns) VMs of s made from
// another template.
func (p *Pool) take(s Shape, current string) (*entry, []*entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, errdefs.ErrNotFound.WithMessage("pool: closed")
	}
	st := p.useLocked(s)
	stale := st.purgeLocked(current)
	switch {
	case st.disabled != nil:
		return nil, stale, errdefs.ErrNotFound.WithMessage("pool: " + st.disabled.Error())
	case len(st.ready) == 0 && len(stale) > 0:
		return nil, stale, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("pool: the VMs of %s were of an invalidated template; refilling", s))
	case len(st.ready) == 0:
		return nil, stale, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("pool: no VM of %s ready yet", s))
	}
	e := st.ready[0]
	st.ready[0] = nil
	st.ready = st.ready[1:]
	if later := time.Now().Add(p.opts.RefillDelay); later.After(st.notBefore) {
		st.notBefore = later
	}
	return e, stale, nil
}
