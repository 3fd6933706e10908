// Command husk is the operator's CLI. `husk doctor` says which VMM, kernel
// and accelerator huskd would use, why, and what is missing for the others;
// `husk fork` starts several containers from one checkpoint at once.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/runtime/accel"
	"github.com/husk-vm/husk/runtime/vmm/vmmselect"
)

var version = "0.1.0-dev"

func main() {
	app := &cli.App{
		Name:    "husk",
		Usage:   "operate a husk installation",
		Version: version,
		Commands: []*cli.Command{{
			Name:  "doctor",
			Usage: "report the VMM, kernel and accelerator huskd would use, and what is missing",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "kernel", Usage: "guest kernel to check (default: the newest /boot/vmlinuz-*)"},
				&cli.StringFlag{Name: "root", Value: "/var/lib/husk", Usage: "huskd's root, for its cached accelerator verdict"},
				&cli.StringFlag{Name: "vmm", Value: vmmselect.Auto, Usage: "the --vmm huskd is given: auto, qemu or cloud-hypervisor"},
				&cli.StringFlag{Name: "qemu", Usage: "the --qemu huskd is given (default: qemu-system-x86_64 in PATH)"},
			},
			Action: func(c *cli.Context) error {
				return doctor(c.Context, os.Stdout, c.String("kernel"), c.String("root"), c.String("vmm"), c.String("qemu"))
			},
		}, forkCommand()},
	}
	if err := app.Run(forkArgsFirst(os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "husk:", err)
		os.Exit(1)
	}
}

func doctor(ctx context.Context, w io.Writer, kernelPath, root, vmmName, qemuPath string) error {
	problems := 0
	report := func(ok bool, what, detail string) {
		mark := "ok  "
		if !ok {
			mark = "MISS"
			problems++
		}
		fmt.Fprintf(w, "[%s] %-20s %s\n", mark, what, detail)
	}
	if k, err := kernel.Find(kernelPath); err == nil {
		report(true, "kernel", fmt.Sprintf("%s (%s), modules in %s", k.Path, k.Version, k.ModulesDir))
	} else {
		report(false, "kernel", err.Error()+": apt-get install linux-image-cloud-amd64")
	}
	verdict := accelVerdict(ctx, root)
	report(true, "accel", verdict.reason)
	reportVMM(w, report, vmmName, qemuPath != "", vmmselect.Host{
		CH:    vmmselect.FindCH(os.Getenv, exec.LookPath),
		QEMU:  vmmselect.FindQEMU(qemuPath, exec.LookPath),
		Accel: verdict.accel, AccelReason: verdict.reason,
	})
	for _, tool := range []string{"mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			report(false, tool, "not in PATH: apt-get install e2fsprogs")
		} else {
			report(true, tool, "found")
		}
	}
	if problems > 0 {
		return fmt.Errorf("%d problem(s) found", problems)
	}
	return nil
}

type verdict struct{ accel, reason string }

// accelVerdict is huskd's cached verdict when there is one, else what
// can be said without calibration boots.
func accelVerdict(ctx context.Context, root string) verdict {
	p := accel.Probe(ctx, "")
	if !p.Usable {
		return verdict{accel.TCG, "tcg: " + p.Reason}
	}
	var c accel.Choice
	if b, err := os.ReadFile(filepath.Join(root, "accel.json")); err == nil && json.Unmarshal(b, &c) == nil && c.Accel != "" {
		return verdict{c.Accel, c.Accel + ": huskd's last verdict: " + c.Reason}
	}
	return verdict{"", p.Reason + "; kvm or tcg is decided by a calibration boot on huskd's first start"}
}

// reportVMM says which VMM huskd --vmm vmmName would use and why, and
// what the others lack; qemuFlag is whether --qemu named QEMU's binary.
func reportVMM(w io.Writer, report func(bool, string, string), vmmName string, qemuFlag bool, h vmmselect.Host) {
	d, err := vmmselect.Decide(vmmName, h)
	if err != nil {
		report(false, "vmm", err.Error())
	} else {
		report(true, "vmm", fmt.Sprintf("%s (%s): %s", d.VMM, d.Binary, d.Reason))
	}
	qemuFix := "apt-get install qemu-system-x86"
	if qemuFlag {
		qemuFix = "build it with make qemu, or leave --qemu out for the qemu-system-x86_64 in PATH"
	}
	others := []struct {
		name, fix string
		b         vmmselect.Binary
	}{
		{vmmselect.QEMU, qemuFix, h.QEMU},
		{vmmselect.CloudHypervisor, "install it in PATH or set " + vmmselect.CHBinaryEnv + "=/path/to/cloud-hypervisor", h.CH},
	}
	for _, o := range others {
		if o.name == d.VMM {
			continue
		}
		switch {
		case !o.b.Found():
			fmt.Fprintf(w, "[info] %-20s not usable: %s; %s\n", "vmm "+o.name, o.b.Source, o.fix)
		case o.name == vmmselect.CloudHypervisor && h.Accel != accel.KVM:
			fmt.Fprintf(w, "[info] %-20s %s (%s) found, but it needs kvm and the accelerator is %s\n", "vmm "+o.name, o.b.Path, o.b.Source, orUndecided(h.Accel))
		default:
			fmt.Fprintf(w, "[info] %-20s %s (%s) found; select it with --vmm %s\n", "vmm "+o.name, o.b.Path, o.b.Source, o.name)
		}
	}
}

func orUndecided(a string) string {
	if a == "" {
		return "not decided yet"
	}
	return a
}
