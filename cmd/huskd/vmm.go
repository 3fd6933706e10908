package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/runtime/accel"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/cloudhypervisor"
	"github.com/husk-vm/husk/runtime/vmm/qemu"
	"github.com/husk-vm/husk/runtime/vmm/vmmselect"
)

// vmmHost finds the VMM binaries --vmm chooses between.
func vmmHost() vmmselect.Host {
	return vmmselect.Host{
		CH:   vmmselect.FindCH(os.Getenv, exec.LookPath),
		QEMU: vmmselect.FindQEMU(exec.LookPath),
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

// newQEMU is the QEMU driver, also used for calibration boots. It boots
// kernels through their PVH entry, from ELFs it keeps in kernelCache.
func newQEMU(logger *slog.Logger, kernelCache string) vmm.Driver {
	return qemu.New(qemu.Options{Logger: logger, KernelCache: kernelCache})
}

// noHugePagesUnderTCG turns transparent huge pages off for huskd when its
// guests run under TCG. The flag belongs to the process and is inherited
// by every VMM huskd starts, across exec. QEMU asks for huge pages for
// TCG's translation buffer and for guest RAM; under TCG that buys nothing
// measurable and costs memory, because each vCPU's partly filled buffer
// region and some of QEMU's own allocations are rounded up to 2 MiB. A
// template-started sandbox held 62.7 MiB beyond its guest without them
// against 65.1 MiB with them (three each), and its start took as long
// (bench/README.md, Memory). Under KVM huge pages back the guest's RAM
// in the host's page tables, so they stay on.
func noHugePagesUnderTCG(accel string) error {
	if accel != "tcg" {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_THP_DISABLE, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("turn transparent huge pages off: %w", err)
	}
	return nil
}
