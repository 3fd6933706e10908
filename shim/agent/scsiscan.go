package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Module parameters and the SCSI scan at boot.
//
// A kernel that loads scsi_mod scans every target of a new SCSI host, and
// QEMU's virtio-scsi controller has 256: 256 INQUIRY commands, ~250 ms of
// a boot under TCG, which the loading of the next module waits for. A husk
// VM's disks are at targets 0 to n-1 (the QEMU driver's plan), so the
// driver boots with scsi_mod.scan=manual and the agent scans the targets
// from 0 up to the first one that holds no disk. Disks hot-plugged later
// arrive through virtio-scsi events, which the manual mode leaves alone.
//
// modprobe passes a module the "module.param=value" words of the kernel
// command line; the agent loads modules itself, so it does the same
// (moduleArgs), and a kernel with scsi_mod built in reads the word at boot.

// moduleArgs is the parameter string for module name from cmdline's
// "name.param=value" words, as modprobe builds it; names compare with '-'
// and '_' alike.
func moduleArgs(cmdline, name string) string {
	canonical := func(m string) string { return strings.ReplaceAll(m, "-", "_") }
	var args []string
	for _, w := range strings.Fields(cmdline) {
		if mod, param, ok := strings.Cut(w, "."); ok && param != "" && canonical(mod) == canonical(name) {
			args = append(args, param)
		}
	}
	return strings.Join(args, " ")
}

// moduleName is the module a .ko path holds: the initramfs names each
// file <canonical name>.ko, uncompressed (kernel.ModulesPath).
func moduleName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".ko")
}

// manualSCSIScan says whether scsi_mod leaves the scan to user space,
// from its parameter under sys (/sys).
func manualSCSIScan(sys string) bool {
	b, err := os.ReadFile(filepath.Join(sys, "module/scsi_mod/parameters/scan"))
	return err == nil && strings.TrimSpace(string(b)) == "manual"
}

// maxScanTargets bounds the scan of one host: the QEMU driver's maxDisks.
const maxScanTargets = 16

// scanSCSIHosts scans each SCSI host under sys (/sys) target by target,
// from 0 up to the first target where no device answers. It returns the
// number of devices found.
func scanSCSIHosts(sys string) (int, error) {
	hosts, err := filepath.Glob(filepath.Join(sys, "class/scsi_host/host*"))
	if err != nil {
		return 0, err
	}
	found := 0
	for _, h := range hosts {
		n := strings.TrimPrefix(filepath.Base(h), "host")
		for t := 0; t < maxScanTargets; t++ {
			if err := os.WriteFile(filepath.Join(h, "scan"), []byte(fmt.Sprintf("0 %d 0", t)), 0); err != nil {
				return found, fmt.Errorf("scan %s target %d: %w", filepath.Base(h), t, err)
			}
			if _, err := os.Stat(filepath.Join(sys, "bus/scsi/devices", fmt.Sprintf("%s:0:%d:0", n, t))); err != nil {
				break
			}
			found++
		}
	}
	return found, nil
}
