package main

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/husk-vm/husk/runtime/containers"
	"github.com/husk-vm/husk/runtime/templates"
	"github.com/husk-vm/husk/runtime/vmm"
)

// daemonTemplates is the daemon's template manager; its methods are safe
// on nil (templates off).
type daemonTemplates struct{ m *templates.Manager }

// openTemplates opens the template cache when templates are on and the
// VMM can start from them (QEMU: hot-plug after restore); nil otherwise.
func openTemplates(ctx context.Context, cfg Config, guest containers.Guest, log *slog.Logger) *daemonTemplates {
	if !cfg.Templates {
		log.Info("templates off: every container boots its VM")
		return nil
	}
	if guest.Driver.Name() != "qemu" {
		log.Info("templates off: the VMM cannot hot-plug disks into a restored VM", "vmm", guest.Driver.Name())
		return nil
	}
	m, err := templates.New(ctx, templates.Options{
		Dir: filepath.Join(cfg.Root, "templates"), Driver: guest.Driver,
		Kernel: guest.Kernel, Initramfs: guest.Initramfs, Cmdline: guest.Cmdline, Accel: guest.Accel,
		ReadyTimeout: guest.ReadyTimeout, Logger: log,
	})
	if err != nil {
		log.Warn("templates off", "err", err)
		return nil
	}
	return &daemonTemplates{m: m}
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
	}
}

// Close stops template builds under way.
func (t *daemonTemplates) Close() {
	if t != nil {
		t.m.Close()
	}
}

// Start implements containers.Templates.
func (t *daemonTemplates) Start(ctx context.Context, cfg vmm.Config) (containers.TemplateVM, error) {
	vm, err := t.m.Start(ctx, cfg)
	if err != nil {
		return containers.TemplateVM{}, err
	}
	return containers.TemplateVM{Machine: vm.Machine, Client: vm.Client, DeviceMACs: vm.DeviceMACs}, nil
}
