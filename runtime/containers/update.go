package containers

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"

	"github.com/husk-vm/husk/shim/proto"
)

// minMemory is dockerd's smallest memory limit on Linux, and
// errMinMemory its refusal of a smaller one, at create and update.
const minMemory = 6 << 20

var errMinMemory = errdefs.ErrInvalidArgument.WithMessage("Minimum memory limit allowed is 6MB")

// UpdateOptions are POST /containers/{id}/update's body.
type UpdateOptions struct {
	Resources     container.Resources
	RestartPolicy container.RestartPolicy
}

// Update changes a container's resources and restart policy (docker
// update), with dockerd's checks and its rule that a zero value leaves a
// setting as it is. A stopped container takes the new values at its next
// start. A running one keeps the VM it booted: --memory and --cpus size
// that VM and QEMU here cannot resize it, so changing them is refused
// until the container is stopped, unless the new --memory fits the VM it
// runs in: then, as --pids-limit, it is the container's cgroup's limit at
// once, and the VM is sized for it at the next start. The other resource
// settings are stored as dockerd stores them.
func (m *Manager) Update(ctx context.Context, ref string, opts UpdateOptions) (container.UpdateResponse, error) {
	resp := container.UpdateResponse{Warnings: []string{}}
	if err := validateUpdate(opts); err != nil {
		return resp, err
	}
	c, err := m.lookup(ref)
	if err != nil {
		return resp, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed || c.rec.RemovalInProgress || c.rec.State.Dead {
		return resp, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Cannot update container %s: container is marked for removal and cannot be \"update\"", c.rec.ID))
	}
	old := c.rec.HostConfig
	if old == nil {
		old = &container.HostConfig{}
	}
	hc := *old
	if err := applyUpdate(&hc, opts); err != nil {
		return resp, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Cannot update container %s: %v", c.rec.ID, err))
	}
	// Within the VM it started in, a running container's --memory and
	// --cpus are its cgroup's limits, which change at once; beyond it
	// they would need a bigger VM.
	if c.run != nil && (hc.Memory != old.Memory && m.guest.memoryMiB(&hc) > c.vmMemoryMiB() ||
		hc.NanoCPUs != old.NanoCPUs && cpus(&hc, m.guest.CPUs) > c.vmCPUs()) {
		return resp, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Cannot update container %s: --memory and --cpus size the container's VM, which cannot be resized while it runs; stop the container, update it and start it again", c.rec.ID))
	}
	if r := c.run; r != nil && hc.CpusetCpus != old.CpusetCpus {
		if err := pinVMM(r.machine.PID(), hc.CpusetCpus); err != nil {
			return resp, fmt.Errorf("Cannot update container %s: %w", c.rec.ID, err)
		}
	}
	// As dockerd, a running container's pids and memory limits change at
	// once.
	if r := c.run; r != nil && limitsOf(&hc) != limitsOf(old) {
		if err := c.setLimits(ctx, r, limitsOf(&hc)); err != nil {
			return resp, fmt.Errorf("Cannot update container %s: %w", c.rec.ID, err)
		}
	}
	c.rec.HostConfig = &hc
	if err := c.save(); err != nil {
		c.rec.HostConfig = old
		return resp, fmt.Errorf("Cannot update container %s: %w", c.rec.ID, err)
	}
	c.emitLocked(events.ActionUpdate, nil)
	return resp, nil
}

// validateUpdate is what dockerd checks of an update before it looks at
// the container.
func validateUpdate(opts UpdateOptions) error {
	if opts.RestartPolicy.Name != "" {
		if err := container.ValidateRestartPolicy(opts.RestartPolicy); err != nil {
			return errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
	}
	r := opts.Resources
	if err := checkResourceRanges(r, true); err != nil {
		return err
	}
	if err := validateCpuset(r.CpusetCpus); err != nil {
		return err
	}
	if n := int64(runtime.NumCPU()); r.NanoCPUs < 0 || r.NanoCPUs > n*1e9 || (r.NanoCPUs > 0 && r.NanoCPUs < 1e7) {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Range of CPUs is from 0.01 to %d.00, as there are only %d CPUs available", n, n))
	}
	return nil
}

// applyUpdate copies the settings opts gives into hc, as dockerd's
// UpdateContainer does; its errors are the conflicts dockerd reports.
func applyUpdate(hc *container.HostConfig, opts UpdateOptions) error {
	r, cur := opts.Resources, &hc.Resources
	switch {
	case r.NanoCPUs > 0 && cur.CPUPeriod > 0:
		return errors.New("Conflicting options: Nano CPUs cannot be updated as CPU Period has already been set")
	case r.NanoCPUs > 0 && cur.CPUQuota > 0:
		return errors.New("Conflicting options: Nano CPUs cannot be updated as CPU Quota has already been set")
	case r.CPUPeriod > 0 && cur.NanoCPUs > 0:
		return errors.New("Conflicting options: CPU Period cannot be updated as NanoCPUs has already been set")
	case r.CPUQuota > 0 && cur.NanoCPUs > 0:
		return errors.New("Conflicting options: CPU Quota cannot be updated as NanoCPUs has already been set")
	}
	setIf(&cur.BlkioWeight, r.BlkioWeight)
	setIf(&cur.CPUShares, r.CPUShares)
	setIf(&cur.NanoCPUs, r.NanoCPUs)
	setIf(&cur.CPUPeriod, r.CPUPeriod)
	setIf(&cur.CPUQuota, r.CPUQuota)
	setIf(&cur.CpusetCpus, r.CpusetCpus)
	setIf(&cur.CpusetMems, r.CpusetMems)
	if r.Memory != 0 {
		if r.Memory > cur.MemorySwap && r.MemorySwap == 0 {
			return errors.New("Memory limit should be smaller than already set memoryswap limit, update the memoryswap at the same time")
		}
		cur.Memory = r.Memory
	}
	setIf(&cur.MemorySwap, r.MemorySwap)
	setIf(&cur.MemoryReservation, r.MemoryReservation)
	setIf(&cur.CPURealtimePeriod, r.CPURealtimePeriod)
	setIf(&cur.CPURealtimeRuntime, r.CPURealtimeRuntime)
	if r.BlkioWeightDevice != nil {
		cur.BlkioWeightDevice = r.BlkioWeightDevice
	}
	if r.BlkioDeviceReadBps != nil {
		cur.BlkioDeviceReadBps = r.BlkioDeviceReadBps
	}
	if r.BlkioDeviceWriteBps != nil {
		cur.BlkioDeviceWriteBps = r.BlkioDeviceWriteBps
	}
	if r.BlkioDeviceReadIOps != nil {
		cur.BlkioDeviceReadIOps = r.BlkioDeviceReadIOps
	}
	if r.BlkioDeviceWriteIOps != nil {
		cur.BlkioDeviceWriteIOps = r.BlkioDeviceWriteIOps
	}
	if r.PidsLimit != nil {
		cur.PidsLimit = r.PidsLimit
	}
	if opts.RestartPolicy.Name != "" {
		if hc.AutoRemove && opts.RestartPolicy.Name != container.RestartPolicyDisabled {
			return errors.New("Restart policy cannot be updated because AutoRemove is enabled for the container")
		}
		hc.RestartPolicy = opts.RestartPolicy
	}
	return nil
}

// setIf sets *dst to v unless v is the zero value, which leaves a setting
// alone in an update.
func setIf[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

// pidsLimit is the container's pids limit as the agent takes it: 0 for
// none.
func pidsLimit(hc *container.HostConfig) int64 {
	if hc.PidsLimit == nil || *hc.PidsLimit < 0 {
		return 0
	}
	return *hc.PidsLimit
}

// vmMemoryMiB is the RAM of the VM the running container started in:
// what its record says, or (a record from before that was kept) what its
// HostConfig sizes, which was the same unless it has changed since.
// Callers hold c.mu.
func (c *ctr) vmMemoryMiB() int {
	if c.rec.VMMemoryMiB > 0 {
		return c.rec.VMMemoryMiB
	}
	return c.m.guest.memoryMiB(c.rec.HostConfig)
}

// vmCPUs is, as vmMemoryMiB, the vCPUs of the VM the running container
// started in. Callers hold c.mu.
func (c *ctr) vmCPUs() int {
	if c.rec.VMCPUs > 0 {
		return c.rec.VMCPUs
	}
	return cpus(c.rec.HostConfig, c.m.guest.CPUs)
}

// limitsOf are the limits the container's cgroup in the guest keeps.
// --cpus is a quota of a 100 ms period, as dockerd hands it to runc;
// --cpu-period and --cpu-quota are taken as they are.
func limitsOf(hc *container.HostConfig) proto.LimitsSpec {
	l := proto.LimitsSpec{PidsLimit: pidsLimit(hc), MemoryLimit: max(hc.Memory, 0), CpusetCPUs: hc.CpusetCpus}
	if hc.NanoCPUs > 0 {
		l.CPUPeriod = 100_000
		l.CPUQuota = hc.NanoCPUs * l.CPUPeriod / 1e9
	}
	if hc.CPUPeriod > 0 {
		l.CPUPeriod = hc.CPUPeriod
	}
	if hc.CPUQuota > 0 {
		l.CPUQuota = hc.CPUQuota
	}
	if l.CPUQuota <= 0 {
		l.CPUPeriod = 0 // no quota: the period alone limits nothing
	}
	return l
}

// setLimits changes a running container's limits in its guest. A guest
// that sets them only after askAgent gave up, when the update has failed,
// has them set back to the recorded ones. Callers hold c.mu.
func (c *ctr) setLimits(ctx context.Context, r *run, limits proto.LimitsSpec) error {
	set := func(ctx context.Context, limits proto.LimitsSpec) error {
		return r.client.SetLimits(ctx, limits)
	}
	return c.askAgent(ctx, r, func(ctx context.Context) error { return set(ctx, limits) }, func() {
		recorded := limitsOf(c.rec.HostConfig)
		if recorded == limits {
			return
		}
		c.m.log.Warn("the guest set limits late; setting the recorded ones back", "id", c.rec.ID[:12])
		ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
		defer cancel()
		if err := set(ctx, recorded); err != nil {
			c.m.log.Error("set the recorded limits back", "id", c.rec.ID[:12], "err", err)
		}
	})
}
