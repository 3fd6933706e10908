// Command husk is the operator's CLI. `husk doctor` says which VMM, kernel
// and accelerator huskd would use, why, and what is missing for the others;
// `husk fork` starts several containers from one checkpoint at once.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/runtime/accel"
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
			},
			Action: func(c *cli.Context) error {
				return doctor(c.Context, os.Stdout, c.String("kernel"), c.String("root"))
			},
		}, forkCommand()},
	}
	if err := app.Run(forkArgsFirst(os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "husk:", err)
		os.Exit(1)
	}
}

func doctor(ctx context.Context, w io.Writer, kernelPath, root string) error {
	problems := 0
	report := func(ok bool, what, detail string) {
		mark := "ok  "
		if !ok {
			mark = "MISS"
			problems++
		}
		fmt.Fprintf(w, "[%s] %-18s %s\n", mark, what, detail)
	}
	if p, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		report(true, "vmm qemu", p+" (used by --vmm auto)")
	} else {
		report(false, "vmm qemu", "qemu-system-x86_64 not in PATH: apt-get install qemu-system-x86")
	}
	ch := os.Getenv("HUSK_CH_BINARY")
	if ch == "" {
		ch, _ = exec.LookPath("cloud-hypervisor")
	}
	if ch != "" {
		fmt.Fprintf(w, "[info] %-18s %s found, but its driver is not built yet\n", "vmm ch", ch)
	} else {
		fmt.Fprintf(w, "[info] %-18s no binary (cloud-hypervisor in PATH or HUSK_CH_BINARY); its driver is not built yet\n", "vmm ch")
	}
	if k, err := kernel.Find(kernelPath); err == nil {
		report(true, "kernel", fmt.Sprintf("%s (%s), modules in %s", k.Path, k.Version, k.ModulesDir))
	} else {
		report(false, "kernel", err.Error()+": apt-get install linux-image-cloud-amd64")
	}
	p := accel.Probe(ctx, "")
	switch {
	case !p.Usable:
		report(true, "accel", "tcg: "+p.Reason)
	default:
		verdict := "decided by a calibration boot on huskd's first start"
		if b, err := os.ReadFile(filepath.Join(root, "accel.json")); err == nil {
			verdict = "huskd's last verdict: " + string(b)
		}
		report(true, "accel", p.Reason+"; "+verdict)
	}
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
