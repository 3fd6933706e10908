package containers

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/husk-vm/husk/runtime/vmm"
)

// BootToReady boots a diskless guest under accel until its agent answers,
// then takes it down: the measure of a raw VMM start, used to choose the
// accelerator and as the floor in benchmarks.
func (g Guest) BootToReady(ctx context.Context, accel string) (err error) {
	dir, err := os.MkdirTemp("", "husk-boot-")
	if err != nil {
		return fmt.Errorf("boot to ready: %w", err)
	}
	defer os.RemoveAll(dir)
	machine, err := g.Driver.Start(ctx, vmm.Config{
		ID: "calibrate", Dir: dir, Kernel: g.Kernel, Initramfs: g.Initramfs,
		MemoryMiB: g.MemoryMiB, CPUs: g.CPUs, Accel: accel,
	})
	if err != nil {
		return fmt.Errorf("boot to ready under %s: %w", accel, err)
	}
	defer func() {
		_ = machine.Kill()
		waitCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = machine.Wait(waitCtx)
		_ = machine.Cleanup()
	}()
	client, err := connectAgent(ctx, machine)
	if err != nil {
		return fmt.Errorf("boot to ready under %s: %w", accel, err)
	}
	return client.Close()
}
