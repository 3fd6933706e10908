// Package vmmselect decides which VMM huskd runs guests with, and says
// why, so that huskd and `husk doctor` reach the same answer.
//
// cloud-hypervisor is the production VMM, but it runs only on KVM and
// only where its binary is installed; QEMU runs anywhere (TCG included).
// So `--vmm auto` picks cloud-hypervisor when a binary exists and the
// accelerator verdict (runtime/accel: KVM only where it boots faster
// than TCG) is KVM, and QEMU otherwise.
package vmmselect

import (
	"errors"
	"fmt"
	"os/exec"
)

// VMM names, as --vmm spells them.
const (
	Auto            = "auto"
	QEMU            = "qemu"
	CloudHypervisor = "cloud-hypervisor"
)

// CHBinaryEnv names a cloud-hypervisor binary; it wins over PATH.
const CHBinaryEnv = "HUSK_CH_BINARY"

// Binary is a VMM executable found on the host.
type Binary struct {
	// Path is empty when none was found.
	Path string
	// Source says where it was found ("HUSK_CH_BINARY", "PATH") or, when
	// Path is empty, what was looked for.
	Source string
}

// Found reports whether the binary exists.
func (b Binary) Found() bool { return b.Path != "" }

// Host is what the decision depends on.
type Host struct {
	CH   Binary
	QEMU Binary
	// Accel is the accelerator verdict, "kvm" or "tcg"; "" while unknown
	// (before huskd's first calibration).
	Accel       string
	AccelReason string
}

// Decision is the VMM to use and why.
type Decision struct {
	VMM    string
	Binary string
	Reason string
}

// Decide picks the VMM for requested ("auto", "" or a VMM name).
func Decide(requested string, h Host) (Decision, error) {
	accel := h.Accel
	if accel == "" {
		accel = "not decided yet"
	}
	switch requested {
	case "", Auto:
		switch {
		case h.CH.Found() && h.Accel == "kvm":
			return Decision{VMM: CloudHypervisor, Binary: h.CH.Path,
				Reason: fmt.Sprintf("auto: cloud-hypervisor found (%s) and the accelerator is kvm (%s)", h.CH.Source, h.AccelReason)}, nil
		case !h.QEMU.Found():
			if h.CH.Found() {
				return Decision{}, fmt.Errorf("--vmm auto: %s, and cloud-hypervisor needs kvm but the accelerator is %s", h.QEMU.Source, accel)
			}
			return Decision{}, fmt.Errorf("--vmm auto: %s, and %s", h.QEMU.Source, h.CH.Source)
		case h.CH.Found():
			return Decision{VMM: QEMU, Binary: h.QEMU.Path,
				Reason: fmt.Sprintf("auto: cloud-hypervisor found (%s) but the accelerator is %s (%s), and cloud-hypervisor runs only on kvm", h.CH.Source, accel, h.AccelReason)}, nil
		default:
			return Decision{VMM: QEMU, Binary: h.QEMU.Path,
				Reason: fmt.Sprintf("auto: no cloud-hypervisor binary (%s)", h.CH.Source)}, nil
		}
	case QEMU:
		if !h.QEMU.Found() {
			return Decision{}, fmt.Errorf("--vmm qemu: %s", h.QEMU.Source)
		}
		return Decision{VMM: QEMU, Binary: h.QEMU.Path, Reason: "requested"}, nil
	case CloudHypervisor:
		if !h.CH.Found() {
			return Decision{}, fmt.Errorf("--vmm cloud-hypervisor: no binary (%s)", h.CH.Source)
		}
		if h.Accel == "tcg" {
			return Decision{}, fmt.Errorf("--vmm cloud-hypervisor: it runs only on kvm, and the accelerator is tcg (%s)", h.AccelReason)
		}
		return Decision{VMM: CloudHypervisor, Binary: h.CH.Path, Reason: "requested"}, nil
	}
	return Decision{}, fmt.Errorf("unknown --vmm %q: want auto, qemu or cloud-hypervisor", requested)
}

// FindCH looks for cloud-hypervisor: $HUSK_CH_BINARY, else PATH.
func FindCH(getenv func(string) string, lookPath func(string) (string, error)) Binary {
	if p := getenv(CHBinaryEnv); p != "" {
		if _, err := lookPath(p); err != nil {
			return Binary{Source: fmt.Sprintf("%s=%s is not an executable: %v", CHBinaryEnv, p, unwrapExec(err))}
		}
		return Binary{Path: p, Source: CHBinaryEnv}
	}
	if p, err := lookPath("cloud-hypervisor"); err == nil {
		return Binary{Path: p, Source: "PATH"}
	}
	return Binary{Source: "no cloud-hypervisor in PATH and " + CHBinaryEnv + " unset"}
}

// FindQEMU looks for QEMU: the binary --qemu names (path), else
// qemu-system-x86_64 in PATH.
func FindQEMU(path string, lookPath func(string) (string, error)) Binary {
	if path != "" {
		if _, err := lookPath(path); err != nil {
			return Binary{Source: fmt.Sprintf("--qemu %s is not an executable: %v", path, unwrapExec(err))}
		}
		return Binary{Path: path, Source: "--qemu"}
	}
	if p, err := lookPath("qemu-system-x86_64"); err == nil {
		return Binary{Path: p, Source: "PATH"}
	}
	return Binary{Source: "no qemu-system-x86_64 in PATH"}
}

func unwrapExec(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}
