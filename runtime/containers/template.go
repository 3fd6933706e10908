package containers

import (
	"context"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/rootfs"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// Templates start container VMs from snapshots of booted guests
// (package templates); a Manager without them boots every VM.
type Templates interface {
	// Start restores a VM shaped as cfg with cfg.Disks attached and an
	// agent session open, its clock and RNG refreshed, not yet set up.
	// errdefs.ErrNotFound says no template fits (yet), with the reason.
	// freshUpper says that nothing has written the upper disk since it
	// was made, so that it may be replaced by the upper disk of an image
	// template, a snapshot of a guest with a root of the same base disk
	// mounted (which the setup then finds mounted).
	Start(ctx context.Context, cfg vmm.Config, freshUpper bool) (TemplateVM, error)
}

// TemplateVM is a VM Templates.Start restored.
type TemplateVM struct {
	Machine vmm.Machine
	Client  *host.Client
	// DeviceMACs are the MACs its NICs have, in cfg.Nets order.
	DeviceMACs []string
	// Source says where it came from for the debug log: "pool" (restored
	// ahead of time, huskd --pool-size), "image" (from an image template)
	// or "" (restored for this start from its shape's template).
	Source string
}

// BootLabel on a container set to "cold" makes it boot without a
// template, and set to "shape" start without an image template
// (benchmarks compare the paths; it is also a way out should a template
// misbehave).
const BootLabel = "io.husk.boot"

// startContainerVM starts the VM of spec from a template when one fits,
// telling setup which NICs to re-address, and boots it otherwise.
// Callers hold c.mu.
func (c *ctr) startContainerVM(ctx context.Context, spec vmSpec, setup *proto.SetupSpec) (vmm.Machine, *host.Client, error) {
	m := c.m
	g := m.guest
	cold := c.rec.Config.Labels[BootLabel] == "cold"
	// Whatever path the start takes, the VM writes the upper disk.
	fresh := c.rec.FreshUpper != nil && c.rec.Config.Labels[BootLabel] != "shape" && upperUnwritten(spec.disks, *c.rec.FreshUpper)
	c.rec.FreshUpper = nil
	if cold && m.templates != nil {
		m.log.Debug("booting cold", "id", spec.id, "reason", "label "+BootLabel+"=cold")
	}
	if len(spec.shares) > 0 && m.templates != nil && !cold {
		// vhost-user-fs needs the guest's RAM in shared memory from boot,
		// which a template's restored RAM is not.
		m.log.Debug("booting cold", "id", spec.id, "reason", "bind mounts or volumes (virtio-fs)")
		cold = true
	}
	if m.templates != nil && !cold {
		start := time.Now()
		vm, err := m.templates.Start(ctx, vmm.Config{
			ID: spec.id, Dir: spec.dir, Kernel: g.Kernel, Initramfs: g.Initramfs, Cmdline: g.Cmdline,
			MemoryMiB: spec.memoryMiB, CPUs: spec.cpus, Accel: g.Accel, Disks: spec.disks, Nets: spec.nets,
		}, fresh)
		switch {
		case err == nil:
			if setup.Network != nil {
				for i, n := range spec.nets {
					for j := range setup.Network.Interfaces {
						ifc := &setup.Network.Interfaces[j]
						if strings.EqualFold(ifc.MAC, n.MAC) && i < len(vm.DeviceMACs) {
							ifc.DeviceMAC = vm.DeviceMACs[i]
						}
					}
				}
			}
			switch vm.Source {
			case "pool":
				m.log.Info("container VM taken from the pool", "id", spec.id, "took", time.Since(start))
			case "image":
				m.log.Debug("container VM restored from a template", "id", spec.id, "template", "image", "took", time.Since(start))
			default:
				m.log.Debug("container VM restored from a template", "id", spec.id, "template", "shape", "took", time.Since(start))
			}
			return vm.Machine, vm.Client, nil
		case errdefs.IsNotFound(err):
			m.log.Debug("booting cold", "id", spec.id, "reason", err)
		default:
			m.log.Warn("booting cold: template start failed", "id", spec.id, "err", err)
		}
	}
	start := time.Now()
	machine, client, err := g.startVM(ctx, m.log, spec)
	if err == nil {
		m.log.Debug("container VM booted", "id", spec.id, "took", time.Since(start))
	}
	return machine, client, err
}

// upperUnwritten says whether the upper disk among disks still has the
// stamp Create took of it.
func upperUnwritten(disks []vmm.Disk, fresh rootfs.FileStamp) bool {
	for _, d := range disks {
		if d.Serial == upperSerial {
			st, err := rootfs.StampOf(d.Path)
			return err == nil && st == fresh
		}
	}
	return false
}
