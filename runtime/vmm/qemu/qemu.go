// Package qemu is the vmm.Driver for QEMU (qemu-system-x86_64).
//
// Each VM is one QEMU process with direct kernel boot (through the
// kernel's PVH entry when Options.KernelCache is set and the kernel has
// one: see bootKernel), its disks as SCSI
// disks on a virtio-scsi controller (virtio-blk on microvm, which has no
// PCI to hot-plug into anyway), and the agent channel as a virtio-serial port named
// proto.PortName backed by a unix-socket chardev. The machine is Q35 by
// default, or QEMU's microvm (Options.Machine).
//
// The process runs in its own session with its working directory set to
// the VM's directory, which holds everything the driver creates there:
//
//	qmp.sock     QMP monitor (server; one client at a time)
//	agent.sock   the agent channel (server; one client at a time)
//	qemu.pid     pid of the QEMU process, written atomically after start
//	layout.json  the VM's devices and sizes, which a snapshot records
//	console.log  the guest's serial console
//	qemu.log     QEMU's own stdout and stderr
//
// Sockets are given to QEMU as relative paths and reached from the host
// through /proc/self/fd/<dirfd>/, so a VM directory of any length works
// despite the 108-byte limit on unix socket paths.
//
// QMP: there is no maintained Go QMP client in the module proxy
// (digitalocean/go-qemu is unavailable and brings libvirt along), and the
// protocol is a few JSON lines: a greeting, qmp_capabilities, commands
// tagged with an id, and asynchronous events. So this package carries a
// small client (QMP), which also serves stop/cont/migrate for snapshots.
// Nor does any library read QEMU's migration stream, whose RAM sections
// snapshots rewrite to take the guest's RAM out into a file: ramsplit.go
// reads that much of the format and no more.
//
// Why a PC, although microvm boots faster: measured on the project's 2-core
// TCG machine with the Debian 6.1 cloud kernel and a small Go init (boot to
// the init answering on the agent port), an idle host booted microvm in
// 1.72-1.87 s and the i440fx pc in 2.19-2.49 s. But on a starved host (four
// boots at once beside two busy loops) every microvm guest hung before the
// kernel's first message for the whole 3-minute limit, while every pc guest
// booted in ~7 s. A runtime that boots a VM per `docker run` is always at
// risk of a busy host, so a PC is the default; microvm stays available
// (Options.Machine) and needs virtio_mmio, which kernel.GuestModules loads.
// microvm with acpi=off or pit/pic off did not boot this kernel, and
// rtc=off doubled its boot time.
//
// Why Q35 rather than the i440fx pc: the guest looks up a PCI device's
// interrupt in the root bridge's ACPI _PRT each time it enables one, and
// QEMU's pc builds that table in an AML loop of 128 iterations, which the
// guest's ACPI interpreter took ~240 ms to run under TCG, once per device
// (the serial controller, the SCSI controller, each NIC). Q35's _PRT is a
// static package: ~6 ms. Interleaved on the 2-core machine, a raw boot to
// agent-ready took medians of 3.70 s against 4.26 s (n=7), a cold `docker
// run --rm true` 4.07 s against 4.76 s (n=6), and `docker network connect`
// of a running container ~165 ms against ~520 ms. Q35's root bus cannot
// hot-plug, so NICs sit behind a PCI bridge (nicBridgeSlot) that can; a
// PCIe root port per NIC slot instead cost a boot ~30 ms each. On a
// starved host (four boots at once beside two busy loops, on a machine
// whose lone boot takes ~3.7 s) every Q35 guest booted, in 10.8-11.2 s.
package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
	"github.com/husk-vm/husk/shim/proto"
)

// Files in the VM directory.
const (
	qmpSocket   = "qmp.sock"
	agentSocket = "agent.sock"
	pidFile     = "qemu.pid"
	consoleLog  = "console.log"
	outputLog   = "qemu.log"
)

// baseCmdline is what the driver needs on the kernel command line:
// the console on the serial port, and an immediate reboot on panic, which
// -no-reboot turns into QEMU exiting so a crashed guest does not linger;
// then what every husk guest boots with.
const baseCmdline = "console=ttyS0 panic=-1 quiet " + kernel.BootArgs

// defaultMemoryMiB is the guest's memory when Config.MemoryMiB is 0.
const defaultMemoryMiB = 256

// memoryMiB is the guest memory cfg asks for.
func memoryMiB(cfg vmm.Config) int {
	if cfg.MemoryMiB == 0 {
		return defaultMemoryMiB
	}
	return cfg.MemoryMiB
}

// virtio-blk serials are at most 20 bytes (VIRTIO_BLK_ID_BYTES); QEMU
// would silently cut longer ones and the guest would not find its disk.
// SCSI disks allow more, but a VM's disks must fit either.
const maxSerial = 20

// Machine types the driver knows.
const (
	// MachineMicroVM is QEMU's minimal x86 machine: no PCI, its devices on
	// virtio-mmio discovered through ACPI. The guest kernel needs
	// virtio_mmio (kernel.GuestModules includes it).
	MachineMicroVM = "microvm"
	// MachineQ35 is the Q35 PC with virtio-pci devices, booted by qboot
	// where QEMU ships it.
	MachineQ35 = "q35"
)

// manualSCSIScan keeps the guest kernel from scanning all 256 targets of
// the virtio-scsi controller (~250 ms of a boot under TCG): the agent
// scans the targets the VM's disks are at, 0 to n-1 (agent.Boot).
const manualSCSIScan = "scsi_mod.scan=manual"

// q35Options leave out the Q35 devices no guest of the driver uses: the
// AHCI controller and the SMBus controller (the ISA bridge, in the same
// slot, stays).
const q35Options = ",sata=off,smbus=off"

// Options configure the driver.
type Options struct {
	// Binary is the QEMU executable; default qemu-system-x86_64 from PATH.
	Binary string
	// Machine is MachineQ35 (the default) or MachineMicroVM.
	Machine string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// RunAs is the user QEMU switches to once it has opened its disks and
	// sockets (-runas). Default: "nobody" when the caller is root and that
	// user exists; "-" keeps QEMU's user.
	RunAs string
	// TBSizeMiB caps TCG's translation buffer (-accel tcg,tb-size=N).
	// 0 means DefaultTBSizeMiB; -1 leaves QEMU's own default (1 GiB in
	// QEMU 7.2).
	TBSizeMiB int
	// KernelCache is where the driver keeps the uncompressed kernels it
	// boots through their PVH entry (kernel.ExtractPVH) in place of the
	// bzImages it is given; empty boots images as given.
	KernelCache string
	// ReleaseIdle, if positive, has each TCG VM give back its translated
	// code once it has been idle that long (releaseWhenIdle). Only the
	// QEMU `make qemu` builds can; with any other, VMs keep their code.
	ReleaseIdle time.Duration
}

// DefaultTBSizeMiB is TCG's translation buffer per VM. QEMU 7.2 reserves
// 1 GiB and flushes it only when full, so a VM's resident memory grows by
// all the code it ever translates, up to 1 GiB for a long-lived one. The
// cap is set where no start path flushes: measured on the project's
// 2-core machine (issue 8), a VM started from a template translates about
// 38 MiB by the time its process runs, a cold boot about 60 MiB. With 32
// MiB the template path flushed once, just as the container's process
// started, and took 180 ms longer (16 MiB: 800 ms); with 64 MiB it is as
// fast as with QEMU's default. Those were one-vCPU guests: with more, QEMU
// splits the buffer into regions that each vCPU thread fills in turn,
// leaving part of each unused, and a two-vCPU cold boot flushed once soon
// after it in one of two bench runs; a template start still uses under
// half of it.
const DefaultTBSizeMiB = 64

// Driver starts QEMU VMs.
type Driver struct {
	binary      string
	machine     string
	runAs       string
	tbMiB       int
	kernelCache string
	releaseIdle time.Duration
	log         *slog.Logger

	// bootMu guards boot: which file boots each kernel image, decided
	// once per image file (fileID).
	bootMu sync.Mutex
	boot   map[fileID]string

	// firmwareOnce finds out whether QEMU has qboot: firmware is then
	// firmwareQboot, else "" (QEMU's default).
	firmwareOnce sync.Once
	firmware     string

	// versionMu guards version, what the binary said for --version, and
	// versionOf, the file that said it (see Version).
	versionMu sync.Mutex
	versionOf fileID
	version   string

	// own is what the driver has learnt of its binaries' monitor
	// commands, shared by their machines.
	own ownCommands
}

var _ vmm.Driver = (*Driver)(nil)

// New returns a QEMU driver.
func New(opts Options) *Driver {
	d := &Driver{binary: opts.Binary, machine: opts.Machine, runAs: opts.RunAs, tbMiB: opts.TBSizeMiB,
		kernelCache: opts.KernelCache, releaseIdle: opts.ReleaseIdle, log: opts.Logger, boot: map[fileID]string{}}
	if d.tbMiB == 0 {
		d.tbMiB = DefaultTBSizeMiB
	}
	if d.machine == "" {
		d.machine = MachineQ35
	}
	switch d.runAs {
	case "":
		if _, err := user.Lookup("nobody"); err == nil && os.Geteuid() == 0 {
			d.runAs = "nobody"
		}
	case "-":
		d.runAs = ""
	}
	if d.binary == "" {
		d.binary = "qemu-system-x86_64"
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	return d
}

// Name implements vmm.Driver.
func (d *Driver) Name() string { return "qemu" }

// Start implements vmm.Driver. It returns once QEMU answers query-status
// on its monitor; the guest is still booting then.
func (d *Driver) Start(ctx context.Context, cfg vmm.Config) (vmm.Machine, error) {
	var mem memorySpec
	if cfg.FileMemory {
		mem = memorySpec{path: memoryFile, shared: true}
	}
	m, err := d.launch(ctx, cfg, argSpec{memory: mem})
	if err != nil {
		return nil, err
	}
	m.mediaActive = true
	return m, nil
}

// Firmware. On pc, QEMU's default firmware is SeaBIOS; qboot, which QEMU
// ships for fast direct kernel boots (microvm's default), sets up what a
// Linux guest booted with -kernel needs (PCI, ACPI and E820 tables from
// QEMU) and nothing else: no boot menu, no option ROM scan, no disk
// probing. Under TCG, where the firmware runs emulated, a raw boot to
// agent-ready took ~0.13 s less with it (issue 8). It is used when QEMU's
// data directories hold it; a snapshot records the firmware its VM booted
// with, since the firmware's ROM is migrated state.
const firmwareQboot = "qboot.rom"

// CPU models. Under TCG the guest runs on QEMU's "max" CPU, so that images
// built for newer x86-64 levels (SSE4.2, AVX2, ...) run, less ERMS
// ("enhanced rep movsb"). With ERMS the guest kernel clears and copies
// pages with byte-wise "rep stosb"/"rep movsb", and glibc does the same
// for large copies; TCG emulates a rep string instruction one element per
// iteration, so those run up to eight times as many iterations as the
// quadword forms the kernel picks without ERMS. Measured on the project's
// 2-core machine (issue 8), interleaved cold `docker run --rm true`, n=8:
// max 3.05 s, max without ERMS 2.82 s (median). ERMS is a speed hint, not
// an instruction set: every program runs the same without it. The guest
// kernel's hardening features (SMEP, SMAP, UMIP, PKU) cost another
// ~0.1 s under TCG and are kept.
const (
	cpuTCG = "max,erms=off"
	// cpuTCGLegacy is what TCG guests ran on before cpuTCG; snapshots
	// whose layout names no CPU were taken of such guests.
	cpuTCGLegacy = "max"
	cpuKVM       = "host"
)

// memorySpec is a VM's RAM file (vmm.Config.FileMemory): written through
// when shared, mapped copy-on-write otherwise. A shared file is the VM's
// own, and its path, like the driver's other files', is relative to the
// VM directory; a restore's is its snapshot's, by an absolute path. A
// zero memorySpec gives the VM anonymous RAM.
type memorySpec struct {
	path   string
	shared bool
	// from, for a shared file, is a RAM file the VM's starts as a copy
	// of (a restore's that writes through: vmm.Config.FileMemory); empty,
	// the VM's starts as zeros.
	from string
}

// launch starts QEMU for cfg, waiting for an incoming migration when
// spec.incoming is set, and returns once its monitor reports that it
// runs or waits. spec gives what a restore takes from its snapshot (NIC
// slots, CPU model) and the RAM file; the driver fills in the rest. On
// error nothing is left running.
func (d *Driver) launch(ctx context.Context, cfg vmm.Config, spec argSpec) (*Machine, error) {
	if err := validate(cfg, d.machine); err != nil {
		return nil, err
	}
	if d.machine != MachineMicroVM && d.machine != MachineQ35 {
		return nil, fmt.Errorf("qemu machine %q: %w", d.machine, errdefs.ErrInvalidArgument)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("vm dir: %w", err)
	}
	if pid, err := vmmproc.ReadPID(dir, pidFile); err == nil && isOurQEMU(pid, dir) {
		return nil, fmt.Errorf("start vm %s: QEMU %d already runs in %s: %w", cfg.ID, pid, dir, errdefs.ErrConflict)
	}
	spec.machine, spec.runAs, spec.tbMiB = d.machine, d.runAs, d.tbMiB
	if !spec.incoming {
		if spec.kernel, err = d.bootKernel(ctx, cfg.Kernel); err != nil {
			return nil, fmt.Errorf("start vm %s: %w", cfg.ID, err)
		}
	}
	if spec.cpu == "" {
		spec.cpu = cpuModel(cfg.Accel)
	}
	if !spec.incoming && d.machine == MachineQ35 {
		spec.firmware = d.bootFirmware(ctx)
	}
	wantStatus := "running"
	if spec.incoming {
		wantStatus = "inmigrate"
	}
	mem := spec.memory
	args, err := qemuArgs(spec, cfg)
	if err != nil {
		return nil, err
	}
	dirFD, err := vmmproc.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	// Leftovers of a VM that died without Cleanup.
	if err := removeRuntimeFiles(dir); err != nil {
		dirFD.Close()
		return nil, err
	}
	if mem.shared {
		create := func(p string) error { return createMemoryFile(p, memoryMiB(cfg)) }
		if mem.from != "" {
			create = func(p string) error { return copyMemoryFile(ctx, p, mem.from) }
		}
		if err := create(filepath.Join(dir, mem.path)); err != nil {
			dirFD.Close()
			return nil, fmt.Errorf("start vm %s: %w", cfg.ID, err)
		}
	}
	disks, err := openDisks(cfg)
	if err != nil {
		dirFD.Close()
		return nil, err
	}
	out, err := os.OpenFile(filepath.Join(dir, outputLog), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		dirFD.Close()
		closeAll(disks)
		return nil, fmt.Errorf("create qemu log: %w", err)
	}
	// Not CommandContext: the VMM must outlive the request and the daemon.
	cmd := exec.Command(d.binary, args...)
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.ExtraFiles = disks
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	out.Close()
	closeAll(disks)
	if err != nil {
		dirFD.Close()
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	log := d.log.With("vm", cfg.ID, "pid", cmd.Process.Pid)
	log.Debug("qemu started", "args", args)
	m := newMachine(dir, dirFD, cmd.Process.Pid, log)
	m.signal = func(sig syscall.Signal) error { return cmd.Process.Signal(sig) }
	m.own = &d.own
	l := d.layoutOf(cfg, spec.netSlots)
	l.CPU, l.Firmware = spec.cpu, spec.firmware
	m.layout = &l
	go func() {
		err := cmd.Wait()
		log.Debug("qemu exited", "status", err)
		m.exited()
	}()

	if err := m.afterStart(ctx, wantStatus); err != nil {
		m.Kill()
		m.Cleanup()
		return nil, fmt.Errorf("start vm %s: %w", cfg.ID, err)
	}
	if d.releaseIdle > 0 && cfg.Accel != "kvm" {
		go m.releaseWhenIdle(d.releaseIdle)
	}
	return m, nil
}

func (m *Machine) afterStart(ctx context.Context, wantStatus string) error {
	// The layout first: a pid file is what Reattach trusts, and a
	// reattached VM must still be able to take a snapshot.
	b, err := json.Marshal(m.layout)
	if err != nil {
		return fmt.Errorf("encode vm layout: %w", err)
	}
	if err := vmmproc.WriteFileAtomic(filepath.Join(m.dir, layoutFile), b); err != nil {
		return err
	}
	if err := vmmproc.WriteFileAtomic(filepath.Join(m.dir, pidFile), []byte(strconv.Itoa(m.pid)+"\n")); err != nil {
		return err
	}
	q, err := m.waitQMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	st, err := queryStatus(ctx, q)
	if err != nil {
		return err
	}
	if st != wantStatus {
		return fmt.Errorf("qemu status %q after start, want %s", st, wantStatus)
	}
	return nil
}

// waitQMP connects to the monitor as soon as QEMU has created it.
func (m *Machine) waitQMP(ctx context.Context) (*QMP, error) {
	for {
		q, err := DialQMP(ctx, m.path(qmpSocket))
		if err == nil {
			return q, nil
		}
		select {
		case <-m.done:
			return nil, fmt.Errorf("qemu exited during start: %s", vmmproc.OutputTail(filepath.Join(m.dir, outputLog)))
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for qmp: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func validate(cfg vmm.Config, machine string) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("vm %s: %s: %w", cfg.ID, fmt.Sprintf(format, a...), errdefs.ErrInvalidArgument)
	}
	switch {
	case cfg.Dir == "":
		return bad("no directory")
	case cfg.Kernel == "":
		return bad("no kernel")
	case cfg.Initramfs == "":
		return bad("no initramfs")
	case cfg.MemoryMiB < 0, cfg.CPUs < 0:
		return bad("negative memory or cpus")
	case cfg.Accel != "" && cfg.Accel != "tcg" && cfg.Accel != "kvm":
		return bad("unknown accelerator %q", cfg.Accel)
	}
	if len(cfg.Disks) > maxDisks || len(cfg.Nets) > maxNets {
		return bad("%d disks and %d NICs, at most %d and %d", len(cfg.Disks), len(cfg.Nets), maxDisks, maxNets)
	}
	for _, d := range cfg.Disks {
		if d.Removable && machine != MachineQ35 {
			return fmt.Errorf("vm %s: machine %s has no removable disks: %w", cfg.ID, machine, errdefs.ErrNotImplemented)
		}
		if d.Path == "" && !d.Removable {
			return bad("disk without a path")
		}
		if len(d.Serial) > maxSerial {
			return bad("disk serial %q longer than %d bytes", d.Serial, maxSerial)
		}
	}
	if st, err := os.Stat(cfg.Dir); err != nil || !st.IsDir() {
		return bad("directory %s does not exist", cfg.Dir)
	}
	return nil
}

// argSpec is what of the driver's settings shapes a command line.
type argSpec struct {
	machine string
	// runAs is the user QEMU switches to ("" keeps root).
	runAs string
	// tbMiB is TCG's translation buffer; <= 0 leaves QEMU's default.
	tbMiB int
	// incoming makes a QEMU that waits for a migration (a restore).
	incoming bool
	// netSlots puts cfg.Nets[i] in NIC slot netSlots[i] (behind the NIC
	// bridge), as a restore must place the NICs of a VM that had
	// some hot-plugged; nil puts them in the first slots in order.
	netSlots []int
	// memory is the guest RAM's file, if any.
	memory memorySpec
	// cpu is the -cpu model; "" is cpuModel(cfg.Accel).
	cpu string
	// kernel is the file QEMU boots for cfg.Kernel; "" is cfg.Kernel.
	kernel string
	// firmware is the -bios file, looked up in QEMU's data directories;
	// "" is QEMU's default.
	firmware string
}

// bootFirmware is the firmware Q35 VMs boot with: qboot when QEMU's data
// directories (qemu -L help) hold it, else QEMU's default.
func (d *Driver) bootFirmware(ctx context.Context) string {
	d.firmwareOnce.Do(func() {
		// Decided once for the driver's life, so not by a caller's
		// cancelled context.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, d.binary, "-L", "help").Output()
		if err != nil {
			d.log.Info("booting with QEMU's default firmware", "reason", fmt.Sprintf("list data directories: %v", err))
			return
		}
		for _, dir := range strings.Fields(string(out)) {
			if _, err := os.Stat(filepath.Join(dir, firmwareQboot)); err == nil {
				d.firmware = firmwareQboot
				return
			}
		}
		d.log.Info("booting with QEMU's default firmware", "reason", firmwareQboot+" is not in QEMU's data directories")
	})
	return d.firmware
}

// bootKernel is the file QEMU boots for the kernel image at path: its
// uncompressed ELF when the driver has a kernel cache and the kernel has a
// PVH entry, else the image itself (logged once per image).
func (d *Driver) bootKernel(ctx context.Context, path string) (string, error) {
	if d.kernelCache == "" {
		return path, nil
	}
	key, err := statFile(path)
	if err != nil {
		return "", fmt.Errorf("guest kernel: %w", err)
	}
	d.bootMu.Lock()
	defer d.bootMu.Unlock()
	if f, ok := d.boot[key]; ok {
		return f, nil
	}
	f, err := kernel.ExtractPVH(ctx, path, d.kernelCache)
	switch {
	case errors.Is(err, kernel.ErrNoPVH):
		d.log.Info("booting the kernel image as it is", "kernel", path, "reason", err)
		f = path
	case err != nil:
		return "", err
	default:
		d.log.Debug("booting the kernel through its PVH entry", "kernel", path, "elf", f)
	}
	d.boot[key] = f
	return f, nil
}

// cpuModel is the CPU a VM boots on under accel.
func cpuModel(accel string) string {
	if accel == "kvm" {
		return cpuKVM
	}
	return cpuTCG
}

// qemuArgs is QEMU's command line. Paths of host files are absolute
// because QEMU runs in the VM directory; paths of the driver's own files
// are relative to it.
//
// Every VMM is confined: a seccomp filter (-sandbox) denies obsolete
// system calls, spawning processes and changing resource controls, and
// with runAs QEMU gives up root for that user once its files are open,
// which also leaves it no way back. The filter cannot also deny set*id
// calls: QEMU installs it before -runas switches user.
//
// A restoring QEMU (incoming) gets no -kernel, -initrd or -append: the
// guest's memory comes from the snapshot, and QEMU would otherwise keep
// the kernel and initramfs in its own memory for the VM's lifetime (as
// fw_cfg data for a boot that never happens; 14 MiB for Debian's
// kernel). None of them is migration state, and the option ROM that
// loads them has no RAM block on a PC machine.
func qemuArgs(spec argSpec, cfg vmm.Config) ([]string, error) {
	machine, runAs := spec.machine, spec.runAs
	netSlots := spec.netSlots
	if netSlots == nil {
		netSlots = denseSlots(len(cfg.Nets))
	}
	if len(netSlots) != len(cfg.Nets) {
		return nil, fmt.Errorf("vm %s: %d NICs for %d NIC slots: %w", cfg.ID, len(cfg.Nets), len(netSlots), errdefs.ErrInvalidArgument)
	}
	abs := func(p string) (string, error) {
		a, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("vm %s: path %s: %w", cfg.ID, p, err)
		}
		return a, nil
	}
	bootFile := spec.kernel
	if bootFile == "" {
		bootFile = cfg.Kernel
	}
	kernelPath, err := abs(bootFile)
	if err != nil {
		return nil, err
	}
	initrd, err := abs(cfg.Initramfs)
	if err != nil {
		return nil, err
	}
	mem := memoryMiB(cfg)
	cpus := max(cfg.CPUs, 1)
	accelOpt := "tcg"
	if spec.tbMiB > 0 {
		accelOpt += ",tb-size=" + strconv.Itoa(spec.tbMiB)
	}
	if cfg.Accel == "kvm" {
		accelOpt = "kvm"
	}
	cpu := spec.cpu
	if cpu == "" {
		cpu = cpuModel(cfg.Accel)
	}
	accel := []string{"-accel", accelOpt, "-cpu", cpu}
	cmdline := baseCmdline
	if machine == MachineQ35 {
		cmdline += " " + manualSCSIScan
	}
	if c := strings.TrimSpace(cfg.Cmdline); c != "" {
		cmdline += " " + c
	}
	// The same devices on either machine, on its own transport; Q35's
	// disks are SCSI disks (below).
	blk, serial := "", "virtio-serial-pci"
	if machine == MachineMicroVM {
		blk, serial = "virtio-blk-device", "virtio-serial-device"
	}
	args := []string{"-M", machine}
	if machine == MachineQ35 {
		args[1] += q35Options
	}
	// debug-threads names QEMU's threads ("CPU 0/TCG", "worker"), which
	// a stalled guest's report lists (DescribeStall); they otherwise all
	// carry the process's name.
	if cfg.ID != "" {
		args = append(args, "-name", optEscape(cfg.ID)+",process="+optEscape("husk-"+cfg.ID)+",debug-threads=on")
	}
	args = append(args, accel...)
	args = append(args,
		"-m", strconv.Itoa(mem),
		"-smp", strconv.Itoa(cpus),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
	)
	if spec.memory.path != "" {
		if len(cfg.Shares) > 0 {
			return nil, fmt.Errorf("vm %s: file-backed memory and virtio-fs shares: %w", cfg.ID, errdefs.ErrInvalidArgument)
		}
		// The backend takes the id of the machine's default RAM, so the
		// RAM block a migration stream names is the same as an
		// anonymous-RAM VM's and snapshots restore into either.
		share := "off"
		if spec.memory.shared {
			share = "on"
		}
		id := defaultRAMID(machine)
		args = append(args,
			"-object", fmt.Sprintf("memory-backend-file,id=%s,size=%dM,mem-path=%s,share=%s", id, mem, optEscape(spec.memory.path), share),
			"-machine", "memory-backend="+id)
	}
	if spec.firmware != "" {
		args = append(args, "-bios", spec.firmware)
	}
	if spec.incoming {
		args = append(args, "-incoming", "defer")
	} else {
		args = append(args, "-kernel", kernelPath, "-initrd", initrd, "-append", cmdline)
	}
	args = append(args,
		"-chardev", "file,id=console,path="+consoleLog,
		"-serial", "chardev:console",
		"-qmp", "unix:"+qmpSocket+",server=on,wait=off",
		"-sandbox", "on,obsolete=deny,spawn=deny,resourcecontrol=deny",
	)
	if runAs != "" {
		args = append(args, "-runas", runAs)
	}
	if machine == MachineQ35 {
		args = append(args,
			"-device", "virtio-scsi-pci,id=scsi0"+slotOpt(machine, scsiSlot),
			"-device", fmt.Sprintf("pci-bridge,id=%s,chassis_nr=2", nicBridge)+slotOpt(machine, nicBridgeSlot))
	}
	fd := firstDiskFD
	for i, d := range cfg.Disks {
		ro := "off"
		if d.ReadOnly {
			ro = "on"
		}
		set := diskFdSet(i)
		for range diskModes(d) {
			args = append(args, "-add-fd", fmt.Sprintf("fd=%d,set=%d", fd, set))
			fd++
		}
		id := diskNode(i)
		dev := blk + ",id=" + diskDevice(i) + ",drive=" + id + ",serial=" + optEscape(d.Serial)
		if machine == MachineQ35 {
			dev = fmt.Sprintf("scsi-hd,bus=%s,channel=0,scsi-id=%d,lun=0,id=%s,drive=%s,serial=%s", scsiBus, i, diskDevice(i), id, optEscape(d.Serial))
		}
		if d.Removable {
			dev += ",removable=on"
		}
		drive := fmt.Sprintf("file=/dev/fdset/%d,file.locking=off,if=none,format=raw,id=%s,readonly=%s", set, id, ro)
		if d.Path == "" {
			// An empty backend: its read-only flag must be the medium's
			// to come, or QEMU refuses to insert a read-only one.
			drive = fmt.Sprintf("if=none,id=%s,readonly=%s", id, ro)
		}
		args = append(args, "-drive", drive, "-device", dev)
	}
	if len(cfg.Nets) == 0 {
		args = append(args, "-nic", "none")
	}
	// romfile= leaves out the NIC's iPXE option ROM: nothing network-boots,
	// and SeaBIOS initialising iPXE cost every cold boot with a NIC time
	// under TCG that a VM without one does not spend.
	netDev := "virtio-net-pci,romfile="
	if machine == MachineMicroVM {
		netDev = "virtio-net-device"
	}
	for i, n := range cfg.Nets {
		slot := netSlots[i]
		if slot < 0 || slot >= maxNets {
			return nil, fmt.Errorf("vm %s: NIC slot %d out of range: %w", cfg.ID, slot, errdefs.ErrInvalidArgument)
		}
		// script=no: the caller made the TAP; QEMU only opens it. The
		// device's id is what RemoveNIC unplugs.
		args = append(args,
			"-netdev", "tap,id="+netdevID(slot)+",ifname="+optEscape(n.Tap)+",script=no,downscript=no",
			"-device", netDev+",id="+nicID(slot)+",netdev="+netdevID(slot)+",mac="+optEscape(n.MAC)+nicSlotOpt(machine, slot),
		)
	}
	shareArgs, err := sharesArgs(machine, dir(cfg), mem, cfg.Shares)
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", cfg.ID, err)
	}
	args = append(args, shareArgs...)
	args = append(args,
		"-device", serial+",id=vserial,max_ports="+strconv.Itoa(serialPorts)+slotOpt(machine, serialSlot),
		"-chardev", "socket,id="+agentChardev+",path="+agentSocket+",server=on,wait=off",
		"-device", "virtserialport,bus=vserial.0,chardev="+agentChardev+",name="+proto.PortName,
	)
	return args, nil
}

// serialPorts is the size of the virtio-serial controller: port 0, which
// the virtio console protocol reserves, and the agent's port. QEMU's
// default of 31 gives the controller 64 virtqueues, each with an event
// notifier that QEMU's main loop polls on every wake-up. Under TCG, where
// the guest's timers and I/O wake that loop hundreds of times per
// container start, two ports took the main thread's CPU time for a
// template start from a median of 0.22 s to 0.17 s (10 interleaved starts
// each), QEMU's descriptors from 97 to 37 and its private memory by
// 0.5 MiB.
const serialPorts = 2

// Disks reach QEMU as descriptors the daemon opened (-add-fd, then
// file=/dev/fdset/N), never by path. QEMU runs as "nobody" and a snapshot
// makes it reopen each writable disk read-only (it inactivates the disks
// when the migration completes, and reactivates them on cont); a reopen
// by path would be refused. Given a set holding one descriptor per access
// mode, QEMU picks the one that fits instead of opening anything.
//
// QEMU's image locking is off (file.locking=off): its locks are OFD locks,
// and a descriptor of the set keeps the locks of its open file description
// after QEMU has switched to the other one, so the reactivated disk would
// conflict with itself ("Failed to get write lock"). The runtime already
// gives each writable disk to one VM at a time; the shared base is
// read-only.
const firstDiskFD = 3 // the first of exec.Cmd.ExtraFiles

// diskModes are the access modes a disk's fd set holds, in order; an
// empty removable disk has none.
func diskModes(d vmm.Disk) []int {
	if d.Path == "" {
		return nil
	}
	if d.ReadOnly {
		return []int{os.O_RDONLY}
	}
	return []int{os.O_RDWR, os.O_RDONLY}
}

// openDisks opens every disk in every mode qemuArgs announced, in its order.
func openDisks(cfg vmm.Config) (_ []*os.File, err error) {
	var files []*os.File
	defer func() {
		if err != nil {
			closeAll(files)
		}
	}()
	for _, d := range cfg.Disks {
		for _, mode := range diskModes(d) {
			f, err := os.OpenFile(d.Path, mode, 0)
			if err != nil {
				return nil, fmt.Errorf("vm %s: open disk: %w", cfg.ID, err)
			}
			files = append(files, f)
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// defaultRAMID is the id QEMU gives a machine's RAM backend when none is
// named: the name of its RAM block in a migration stream.
func defaultRAMID(machine string) string {
	if machine == MachineMicroVM {
		return "microvm.ram"
	}
	return "pc.ram"
}

// createMemoryFile makes an empty (sparse) RAM file of memMiB for a
// FileMemory VM, replacing one a dead VM left. It is created here rather
// than by QEMU so that only root can read the guest's memory.
func createMemoryFile(path string, memMiB int) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove old memory file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create memory file: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(int64(memMiB) << 20); err != nil {
		return fmt.Errorf("size memory file: %w", err)
	}
	return nil
}

// copyMemoryFile makes the RAM file at path a copy of src, replacing one a
// dead VM left, readable by root only like createMemoryFile's. cp
// rather than a copy loop here: it clones extents where the file system
// can and otherwise copies only src's data, keeping its holes (a
// template's 256 MiB file holds ~90 MB), as rootfs.CopyDisk does for
// disks, which a VMM driver does not import.
func copyMemoryFile(ctx context.Context, path, src string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove old memory file: %w", err)
	}
	out, err := exec.CommandContext(ctx, "cp", "--reflink=auto", "--sparse=always", "--", src, path).CombinedOutput()
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("copy memory file %s: %w: %s", src, err, bytes.TrimSpace(out))
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("copy memory file: %w", err)
	}
	return nil
}

// maxTag is the size of the tag field of virtio-fs's config space.
const maxTag = 36

// sharesArgs attaches each share as a vhost-user-fs device. vhost-user
// needs the guest's RAM in memory virtiofsd can map, so a VM with shares
// gets its RAM from a shared memfd. The sockets are connected while QEMU
// is still root, before -runas, and stay connected for its lifetime.
func sharesArgs(machine, dir string, memMiB int, shares []vmm.Share) ([]string, error) {
	if len(shares) == 0 {
		return nil, nil
	}
	dev := "vhost-user-fs-pci"
	if machine == MachineMicroVM {
		dev = "vhost-user-fs-device"
	}
	if len(shares) > maxShares {
		return nil, fmt.Errorf("%d virtio-fs shares, at most %d: %w", len(shares), maxShares, errdefs.ErrInvalidArgument)
	}
	args := []string{
		"-object", fmt.Sprintf("memory-backend-memfd,id=mem,size=%dM,share=on", memMiB),
		"-machine", "memory-backend=mem",
	}
	if machine == MachineQ35 {
		args = append(args, "-device", fmt.Sprintf("pci-bridge,id=fsbridge,chassis_nr=1,addr=0x%x", shareBridgeSlot))
	}
	for i, sh := range shares {
		if sh.Tag == "" || len(sh.Tag) > maxTag {
			return nil, fmt.Errorf("share tag %q must have 1 to %d bytes: %w", sh.Tag, maxTag, errdefs.ErrInvalidArgument)
		}
		if sh.Socket == "" {
			return nil, fmt.Errorf("share %s has no socket: %w", sh.Tag, errdefs.ErrInvalidArgument)
		}
		sock := sh.Socket
		if dir != "" && filepath.Dir(filepath.Clean(sock)) == dir {
			sock = filepath.Base(sock)
		}
		id := fmt.Sprintf("fs%d", i)
		args = append(args,
			"-chardev", "socket,id="+id+",path="+optEscape(sock),
			"-device", dev+",chardev="+id+",tag="+optEscape(sh.Tag)+shareSlotOpt(machine, i),
		)
	}
	return args, nil
}

// shareSlotOpt pins share i to its own slot behind the share bridge.
func shareSlotOpt(machine string, i int) string {
	if machine != MachineQ35 {
		return ""
	}
	return fmt.Sprintf(",bus=fsbridge,addr=0x%x", i+1)
}

// dir is the VM directory as an absolute path, or "" when it cannot be
// made one (validate has already refused that case for real starts).
func dir(cfg vmm.Config) string {
	d, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return ""
	}
	return d
}

// optEscape quotes a value for QEMU's key=value,... option syntax, where
// a literal comma is written twice.
func optEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// Reattach implements vmm.Driver: it finds the QEMU a previous Start left
// in dir, checks it is still that process (its working directory is dir
// and it serves qmp.sock), and confirms its monitor answers. The error
// wraps errdefs.ErrNotFound when no such QEMU runs any more.
func (d *Driver) Reattach(ctx context.Context, dir string) (vmm.Machine, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("vm dir: %w", err)
	}
	pid, pidfd, err := vmmproc.FindRecorded(dir, pidFile, "qemu", func(pid int) bool { return isOurQEMU(pid, dir) })
	if err != nil {
		return nil, err
	}
	dirFD, err := vmmproc.OpenDir(dir)
	if err != nil {
		unix.Close(pidfd)
		return nil, err
	}
	log := d.log.With("dir", dir, "pid", pid)
	m := newMachine(dir, dirFD, pid, log)
	m.pidfd = pidfd
	m.own = &d.own
	if b, err := os.ReadFile(filepath.Join(dir, layoutFile)); err == nil {
		var l layout
		if json.Unmarshal(b, &l) == nil {
			m.layout = &l
		}
	}
	m.signal = func(sig syscall.Signal) error { return unix.PidfdSendSignal(pidfd, sig, nil, 0) }
	// Check the monitor before the exit waiter starts, so a failure here
	// can close the pidfd without a goroutine still polling it.
	q, err := DialQMP(ctx, m.path(qmpSocket))
	if err == nil {
		err = q.Execute(ctx, "query-status", nil, nil)
		q.Close()
	}
	if err != nil {
		m.releaseFDs()
		return nil, fmt.Errorf("reattach %s: monitor: %w", dir, err)
	}
	go func() {
		vmmproc.WaitPidfd(pidfd)
		log.Debug("qemu exited")
		m.exited()
	}()
	if d.releaseIdle > 0 {
		// A KVM VM refuses the command, which ends the watch.
		go m.releaseWhenIdle(d.releaseIdle)
	}
	return m, nil
}

// isOurQEMU checks that pid is a QEMU started in dir by this driver.
func isOurQEMU(pid int, dir string) bool {
	cmdline, ok := vmmproc.CmdlineIn(pid, dir)
	if !ok {
		return false
	}
	argv := strings.Split(string(cmdline), "\x00")
	return strings.Contains(filepath.Base(argv[0]), "qemu") &&
		bytes.Contains(cmdline, []byte("\x00unix:"+qmpSocket+",server=on,wait=off\x00"))
}

func removeRuntimeFiles(dir string) error {
	for _, name := range []string{qmpSocket, agentSocket, pidFile, layoutFile, memoryFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", name, err)
		}
	}
	return nil
}

// Machine is one QEMU process, started or reattached.
type Machine struct {
	pid    int
	dir    string
	log    *slog.Logger
	signal func(syscall.Signal) error
	done   chan struct{}
	// openTap attaches to a TAP for AddNIC; nil means the real one.
	openTap func(name string) (*os.File, error)
	// hotplug serialises NIC hot-plugs, which read, change and record
	// the layout.
	hotplug sync.Mutex

	mu    sync.Mutex
	dirFD *os.File
	// pidfd is set for reattached machines; -1 otherwise.
	pidfd int
	// layout is what a snapshot of this VM records; nil when a
	// reattached VM's directory did not say.
	layout *layout
	// ramTaken: a snapshot holds this FileMemory VM's RAM file.
	ramTaken bool
	// mediaActive: media inserted now need no activateMedia, because the
	// VM was started rather than restored, or has been activated since.
	mediaActive bool
	// own is what the driver knows of its binaries' commands; nil, the
	// VM's QEMU is asked every time.
	own *ownCommands
	// earlyAgent is a connection to the agent's channel made before the
	// VM resumed (agentdial.go), for the next DialAgent.
	earlyAgent net.Conn
}

var _ vmm.Machine = (*Machine)(nil)

func newMachine(dir string, dirFD *os.File, pid int, log *slog.Logger) *Machine {
	return &Machine{pid: pid, dir: dir, dirFD: dirFD, log: log, done: make(chan struct{}), pidfd: -1}
}

func (m *Machine) exited() { close(m.done) }

// path is a short name for a file in the VM directory.
func (m *Machine) path(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirFD == nil {
		return filepath.Join(m.dir, name)
	}
	return "/proc/self/fd/" + strconv.Itoa(int(m.dirFD.Fd())) + "/" + name
}

// PID implements vmm.Machine.
func (m *Machine) PID() int { return m.pid }

// DialAgent implements vmm.Machine. QEMU serves one client on the agent
// socket at a time: while a connection is open a second one is accepted
// by the kernel but not served until the first closes. After a close QEMU
// listens again, so a new DialAgent works. The first DialAgent after a
// Restore, or a Resume of a VM whose channel had no client, returns the
// connection made before the VM ran (agentdial.go).
func (m *Machine) DialAgent(ctx context.Context) (net.Conn, error) {
	select {
	case <-m.done:
		m.dropEarlyAgent()
		return nil, fmt.Errorf("dial agent: qemu %d has exited", m.pid)
	default:
	}
	if c := m.takeEarlyAgent(); c != nil {
		return c, nil
	}
	c, err := m.dialAgentSocket(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial agent: %w", err)
	}
	return c, nil
}

func (m *Machine) dialAgentSocket(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", m.path(agentSocket))
}

// QMP opens a monitor session; the caller closes it. QEMU serves one
// monitor client at a time.
func (m *Machine) QMP(ctx context.Context) (*QMP, error) {
	q, err := DialQMP(ctx, m.path(qmpSocket))
	if err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	return q, nil
}

// Shutdown asks QEMU to quit through QMP and waits for it to exit. The
// guest gets no say; use the agent for a guest-side shutdown.
func (m *Machine) Shutdown(ctx context.Context) error {
	q, err := m.QMP(ctx)
	if err != nil {
		return err
	}
	qerr := q.Execute(ctx, "quit", nil, nil)
	q.Close()
	// QEMU may close the monitor before its reply to quit arrives, so only
	// a refusal from QEMU counts as failure; otherwise the exit decides.
	var refused *QMPError
	if errors.As(qerr, &refused) {
		return qerr
	}
	if err := m.Wait(ctx); err != nil {
		return fmt.Errorf("quit qemu %d: %w", m.pid, err)
	}
	return nil
}

// Kill implements vmm.Machine: SIGKILL, then wait for the process to go.
func (m *Machine) Kill() error {
	return vmmproc.Kill("qemu", m.pid, m.done, m.signal)
}

// Wait implements vmm.Machine. It returns nil once the process has
// exited, whatever its status: QEMU's exit code says nothing useful about
// the guest, and Kill makes it nonzero.
func (m *Machine) Wait(ctx context.Context) error {
	return vmmproc.WaitDone(ctx, m.done)
}

// Cleanup implements vmm.Machine. It removes the sockets and the pid file;
// console.log and qemu.log stay for the caller to read or remove with the
// directory. It refuses while QEMU still runs.
func (m *Machine) Cleanup() error {
	select {
	case <-m.done:
	default:
		return fmt.Errorf("cleanup: qemu %d still running: %w", m.pid, errdefs.ErrFailedPrecondition)
	}
	m.releaseFDs()
	m.dropEarlyAgent()
	return removeRuntimeFiles(m.dir)
}

// releaseFDs closes the directory handle and the pidfd. It runs only
// once nothing polls the pidfd: after the process exited, or on a failed
// Reattach before the waiter started.
func (m *Machine) releaseFDs() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirFD != nil {
		m.dirFD.Close()
		m.dirFD = nil
	}
	if m.pidfd >= 0 {
		unix.Close(m.pidfd)
		m.pidfd = -1
	}
}

// Pause implements vmm.Machine through QMP stop.
func (m *Machine) Pause(ctx context.Context) error {
	return m.qmpCommand(ctx, "stop")
}

func (m *Machine) qmpCommand(ctx context.Context, command string) error {
	q, err := m.QMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	if err := q.Execute(ctx, command, nil, nil); err != nil {
		return fmt.Errorf("qemu %d %s: %w", m.pid, command, err)
	}
	return nil
}
