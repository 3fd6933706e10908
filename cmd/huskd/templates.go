package main

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/containers"
	"github.com/husk-vm/husk/runtime/network"
	"github.com/husk-vm/husk/runtime/pool"
	"github.com/husk-vm/husk/runtime/templates"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/cloudhypervisor"
)

// daemonTemplates is the daemon's template manager and, with
// --pool-size, its pool of VMs restored ahead of time; its methods are
// safe on nil (templates off).
type daemonTemplates struct {
	m    *templates.Manager
	pool *pool.Pool // nil: no pool
	log  *slog.Logger
}

// openTemplates opens the template cache when templates are on; nil
// otherwise. cloud-hypervisor restores templates lazily (OnDemand): a
// template's memory file stays while VMs of it run, which a checkpoint's
// need not, so checkpoints keep the driver's default.
func openTemplates(ctx context.Context, cfg Config, guest containers.Guest, disks templates.Disks, log *slog.Logger) *daemonTemplates {
	if !cfg.Templates {
		log.Info("templates off: every container boots its VM")
		return nil
	}
	drv := guest.Driver
	// QEMU's templates carry the container's two disks as empty removable
	// disks, which a restore fills (qemu.Machine.AttachDisks).
	slots := containers.RootDiskSlots()
	if ch, ok := drv.(*cloudhypervisor.Driver); ok {
		slots = nil
		drv = ch.OnDemand()
		// Its templates are snapshotted unwarmed: its unplug is an ACPI
		// eject the guest completes after vm.remove-device returns, so a
		// snapshot right after a warm-up could hold a disk half gone, and
		// nothing this project's CI runs exercises that path.
		disks = nil
	}
	m, err := templates.New(ctx, templates.Options{
		Dir: filepath.Join(cfg.Root, "templates"), Driver: drv,
		Kernel: guest.Kernel, Initramfs: guest.Initramfs, Cmdline: guest.Cmdline, Accel: guest.Accel,
		ReadyTimeout: guest.ReadyTimeout, Disks: disks, WarmDiskSize: guest.UpperSize, Slots: slots, Logger: log,
		KernelSymbol: guest.KernelSymbol,
	})
	if err != nil {
		log.Warn("templates off", "err", err)
		return nil
	}
	return &daemonTemplates{m: m, log: log}
}

func (t *daemonTemplates) starter() containers.Templates {
	if t == nil {
		return nil
	}
	return t
}

func (t *daemonTemplates) prepare(ctx context.Context, memoryMiB, cpus, nics int) {
	if t != nil {
		t.m.Prepare(ctx, memoryMiB, cpus, nics)
		if t.pool != nil {
			t.pool.Prepare(pool.Shape{MemoryMiB: memoryMiB, CPUs: cpus, NICs: nics})
		}
	}
}

// openPool starts the pool of --pool-size VMs per shape. Call it after
// the networks have started: their sweep of leftover TAPs must not run
// while the pool makes its own.
func (t *daemonTemplates) openPool(ctx context.Context, cfg Config, guest containers.Guest, nets *network.Manager, disks pool.Disks) {
	if cfg.PoolSize == 0 {
		return
	}
	if t == nil {
		slog.Default().Info("no VM pool: templates are off")
		return
	}
	if guest.Driver.Name() != "qemu" {
		// A pooled VM is handed over by moving its directory and
		// recording its NICs' MACs (qemu.Machine's Relocate and
		// RecordNICMACs), which the cloud-hypervisor driver lacks.
		t.log.Info("no VM pool: only QEMU's VMs can be handed over from it", "vmm", guest.Driver.Name())
		return
	}
	p, err := pool.New(ctx, pool.Options{
		Dir: filepath.Join(cfg.Root, "pool"), Size: cfg.PoolSize, Templates: t.m, Driver: guest.Driver,
		Kernel: guest.Kernel, Initramfs: guest.Initramfs, Cmdline: guest.Cmdline, Accel: guest.Accel,
		Network: nets, Disks: disks, WarmDiskSize: guest.UpperSize, Logger: t.log,
	})
	if err != nil {
		t.log.Warn("no VM pool", "err", err)
		return
	}
	t.pool = p
	t.log.Info("VM pool", "size", cfg.PoolSize)
}

// Close drains the pool and stops template builds under way.
func (t *daemonTemplates) Close() {
	if t != nil {
		if t.pool != nil {
			t.pool.Close()
		}
		t.m.Close()
	}
}

// Start implements containers.Templates: a VM from the pool when one
// fits, else one restored now from its image's template when the upper
// disk is fresh and one is ready, else from its shape's template.
func (t *daemonTemplates) Start(ctx context.Context, cfg vmm.Config, freshUpper bool) (containers.TemplateVM, error) {
	if t.pool != nil {
		vm, err := t.pool.Start(ctx, cfg)
		switch {
		case err == nil:
			return containers.TemplateVM{Machine: vm.Machine, Client: vm.Client, DeviceMACs: vm.DeviceMACs, Source: "pool"}, nil
		case errdefs.IsNotFound(err):
			t.log.Debug("not from the pool", "id", cfg.ID, "reason", err)
		default:
			t.log.Warn("not from the pool: taking a pooled VM failed", "id", cfg.ID, "err", err)
		}
	}
	if freshUpper {
		vm, err := t.m.StartImage(ctx, cfg)
		switch {
		case err == nil:
			return containers.TemplateVM{Machine: vm.Machine, Client: vm.Client, DeviceMACs: vm.DeviceMACs, Source: "image"}, nil
		case ctx.Err() != nil:
			return containers.TemplateVM{}, err
		case errdefs.IsNotFound(err):
			t.log.Debug("not from an image template", "id", cfg.ID, "reason", err)
		default:
			// The upper disk may be the template's copy by now, which
			// is as fresh: the setup mounts it as any other.
			t.log.Warn("not from an image template: its restore failed", "id", cfg.ID, "err", err)
		}
	}
	vm, err := t.m.Start(ctx, cfg)
	if err != nil {
		return containers.TemplateVM{}, err
	}
	return containers.TemplateVM{Machine: vm.Machine, Client: vm.Client, DeviceMACs: vm.DeviceMACs}, nil
}
