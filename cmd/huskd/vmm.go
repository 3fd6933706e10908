package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/husk-vm/husk/runtime/accel"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/cloudhypervisor"
	"github.com/husk-vm/husk/runtime/vmm/qemu"
	"github.com/husk-vm/husk/runtime/vmm/vmmselect"
)

// vmmHost finds the VMM binaries --vmm chooses between; qemuPath is
// --qemu.
func vmmHost(qemuPath string) vmmselect.Host {
	return vmmselect.Host{
		CH:   vmmselect.FindCH(os.Getenv, exec.LookPath),
		QEMU: vmmselect.FindQEMU(qemuPath, exec.LookPath),
	}
}

// checkVMM refuses an unknown or impossible --vmm before any slow work.
// The accelerator is not known yet, so only names and binaries count.
func checkVMM(name string, host vmmselect.Host) error {
	host.Accel = ""
	_, err := vmmselect.Decide(name, host)
	return err
}

// accelRequest is the --accel to decide with: cloud-hypervisor runs only
// on KVM, so asking for it settles "auto" without calibration boots.
func accelRequest(cfg Config) string {
	if cfg.VMM == vmmselect.CloudHypervisor && (cfg.Accel == "" || cfg.Accel == "auto") {
		return accel.KVM
	}
	return cfg.Accel
}

// pickVMM decides the VMM now that the accelerator verdict is known, and
// returns its driver; calibration boots ran with QEMU's.
func pickVMM(name string, host vmmselect.Host, choice accel.Choice, qemuDriver vmm.Driver, logger *slog.Logger) (vmm.Driver, vmmselect.Decision, error) {
	host.Accel, host.AccelReason = choice.Accel, choice.Reason
	d, err := vmmselect.Decide(name, host)
	if err != nil {
		return nil, d, err
	}
	logger.Info("vmm chosen", "vmm", d.VMM, "binary", d.Binary, "reason", d.Reason)
	if d.VMM == vmmselect.QEMU {
		return qemuDriver, d, nil
	}
	ch, err := cloudhypervisor.New(cloudhypervisor.Options{Binary: d.Binary, Logger: logger})
	if err != nil {
		return nil, d, fmt.Errorf("cloud-hypervisor driver: %w", err)
	}
	return ch, d, nil
}

// newQEMU is the QEMU driver, also used for calibration boots. It runs
// binary ("" is qemu-system-x86_64 from PATH), boots kernels through
// their PVH entry, from ELFs it keeps in kernelCache, and has TCG VMs
// idle for releaseIdle give back their translated code.
func newQEMU(logger *slog.Logger, binary, kernelCache string, releaseIdle time.Duration) vmm.Driver {
	return qemu.New(qemu.Options{Logger: logger, Binary: binary, KernelCache: kernelCache, ReleaseIdle: releaseIdle})
}
