package containers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/host"
)

// vmSpec is one VM to boot with a Guest: container VMs and build VMs
// alike.
type vmSpec struct {
	id        string // short, for logs and errors
	dir       string // the VMM's private directory; exists
	memoryMiB int
	cpus      int
	disks     []vmm.Disk
	nets      []vmm.Net
	shares    []vmm.Share
	// backends are the processes serving shares (virtiofsd), listed
	// beside the VMM in the report of a guest that hangs.
	backends []int
	// reshare starts the shares again for a second boot, and gives their
	// devices and backends: virtiofsd exits with the VMM it served. Nil
	// for a VM without shares.
	reshare func(ctx context.Context) ([]vmm.Share, []int, error)
}

// startVM boots a VM and opens a session with its agent, waiting up to
// ReadyTimeout for the guest. On error nothing is left running. Once the
// guest is up, its VMM gives back the boot images it holds, if it can.
//
// A boot whose kernel reports a soft lockup on its console has the code
// its vCPUs run translated afresh where the VMM can (vmm.AwaitBoot); one
// that still spins, or whose VMM cannot, is given up at once and booted
// again, once. Under TCG one cold boot in ~1,400 hung this way on a
// stress rig, in the code patching of its early boot (bench/README.md,
// *What a guest leaves out*); the watchdog says so ~25 s in, where the
// wait for the agent would go on to its full timeout and fail the start.
// A CPU the watchdog reports that would have come out of its loop by
// itself is helped or booted again all the same.
func (g Guest) startVM(ctx context.Context, log *slog.Logger, spec vmSpec) (vmm.Machine, *host.Client, error) {
	for attempt := 1; ; attempt++ {
		machine, client, err := g.bootOnce(ctx, log, spec)
		var lockup *kernel.LockupError
		if err == nil || attempt == bootAttempts || !errors.As(err, &lockup) || ctx.Err() != nil {
			return machine, client, err
		}
		log.Warn("guest kernel locked up while booting; booting it again", "id", spec.id, "console", lockup.Line)
		// The first boot's console is kept beside the next one's.
		console := filepath.Join(spec.dir, consoleLog)
		if err := os.Rename(console, console+".lockup"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("boot %s again: %w", spec.id, err)
		}
		if spec.reshare != nil {
			if spec.shares, spec.backends, err = spec.reshare(ctx); err != nil {
				return nil, nil, fmt.Errorf("boot %s again: %w", spec.id, err)
			}
		}
	}
}

// bootAttempts is how many times startVM boots a VM whose kernel locks up.
const bootAttempts = 2

// consoleLog is the guest's serial console in a VM's directory, as the
// VMM drivers write it.
const consoleLog = "console.log"

// bootOnce is one boot of startVM's.
func (g Guest) bootOnce(ctx context.Context, log *slog.Logger, spec vmSpec) (_ vmm.Machine, _ *host.Client, err error) {
	machine, err := g.Driver.Start(ctx, vmm.Config{
		ID: spec.id, Dir: spec.dir, Kernel: g.Kernel, Initramfs: g.Initramfs, Cmdline: g.Cmdline,
		MemoryMiB: spec.memoryMiB, CPUs: spec.cpus, Accel: g.Accel, Disks: spec.disks, Nets: spec.nets, Shares: spec.shares,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("boot %s: %w", spec.id, err)
	}
	defer func() {
		if err != nil {
			killVM(machine)
		}
	}()
	// The guest's clock comes from its RTC, read to the whole second, so
	// the first request sets it to the host's, as a container's clock is
	// the host's under dockerd.
	console := filepath.Join(spec.dir, consoleLog)
	client, err := vmm.AwaitBoot(ctx, log, vmm.Boot{
		ID: spec.id, Machine: machine, Console: console, Deadline: time.Now().Add(g.ReadyTimeout),
		Retranslate: g.Accel != "kvm", Symbol: g.KernelSymbol, Backends: spec.backends,
	}, func(ctx context.Context) (*host.Client, error) {
		return host.ConnectWith(ctx, machine, agentRetry, freshen)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("boot %s: %w (console log: %s)", spec.id, err, console)
	}
	releaseBootImages(log, spec.id, machine)
	return machine, client, nil
}

// retranslator is a VM whose VMM can translate afresh the guest code its
// vCPUs run (qemu.Machine under TCG).
type retranslator interface {
	Retranslate(ctx context.Context) (int, error)
}

// bootImagesReleaser is a VM whose VMM can give back the memory of the
// kernel and initramfs it booted from, which it keeps only to load them
// again on a reset (qemu.Machine, under the QEMU `make qemu` builds). Its
// error wraps errors.ErrUnsupported when the VMM is known not to.
type bootImagesReleaser interface {
	ReleaseBootImages(ctx context.Context) error
}

// releaseBootImages has a booted VM's VMM give back its boot images: ~50
// MiB of a cold-booted QEMU's memory with Debian's kernel. It runs in the
// background, off the start's path; a VMM that cannot is left as it is.
func releaseBootImages(log *slog.Logger, id string, machine vmm.Machine) {
	r, ok := machine.(bootImagesReleaser)
	if !ok {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// ErrUnsupported: the VMM is known to keep them, and said so
		// the first time.
		if err := r.ReleaseBootImages(ctx); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			log.Debug("VMM keeps its boot images", "id", id, "err", err)
		}
	}()
}

func freshen(ctx context.Context, client *host.Client) error {
	if err := client.Freshen(ctx, nil); err != nil {
		return fmt.Errorf("set the booted guest's clock: %w", err)
	}
	return nil
}

// killVM ends a VMM at once and removes what its driver made.
func killVM(machine vmm.Machine) {
	_ = machine.Kill()
	waitCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = machine.Wait(waitCtx)
	cancel()
	_ = machine.Cleanup()
}

// stopVM takes a VM down. The agent answers a shutdown only once the
// disks are unmounted and synced, so from then on the VMM is killed rather
// than left to emulate the guest's power-off; without an answer it is
// killed all the same.
func stopVM(log *slog.Logger, id string, machine vmm.Machine, client *host.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Shutdown(ctx); err != nil {
		log.Warn("guest shutdown", "id", id, "err", err)
	}
	_ = client.Close()
	_ = machine.Kill()
	if err := machine.Wait(ctx); err != nil {
		log.Error("VMM did not exit", "id", id, "err", err)
	}
	if err := machine.Cleanup(); err != nil {
		log.Warn("vm cleanup", "id", id, "err", err)
	}
}
