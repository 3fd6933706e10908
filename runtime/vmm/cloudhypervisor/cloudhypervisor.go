// Package cloudhypervisor is the vmm.Driver for cloud-hypervisor.
//
// Each VM is one `cloud-hypervisor --api-socket path=api.sock` process,
// driven over HTTP on that unix socket: vm.create, vm.boot, vm.info,
// vm.pause, vm.resume, vm.snapshot, vm.restore, vm.shutdown,
// vmm.shutdown, vm.resize and vm.counters, as described by the project's
// reference copy of cloud-hypervisor's v53.0 OpenAPI file. The guest boots
// the same bzImage and initramfs as under QEMU (payload.kernel), its disks
// are virtio-blk with serials, its NICs virtio-net on caller-made TAPs,
// its console the legacy serial port written to console.log, and the agent
// channel is virtio-vsock in cloud-hypervisor's hybrid form: a unix socket
// on the host where the host writes "CONNECT <port>\n" and reads
// "OK <n>\n" (see DialAgent).
//
// The process runs in its own session with the VM's directory as working
// directory, which holds everything the driver creates there:
//
//	api.sock        the API (cloud-hypervisor also keeps api.sock.lock)
//	vsock.sock      the hybrid-vsock socket
//	ch.pid          pid of the process, written atomically after start
//	console.log     the guest's serial console
//	ch.log          cloud-hypervisor's own stdout and stderr
//	restore/        after Restore: the private copy of the snapshot's
//	                config.json, beside links to its other files
//
// Sockets are given to cloud-hypervisor as paths relative to that
// directory and reached from the host through /proc/self/fd/<dirfd>/, so a
// VM directory of any length works despite the 108-byte limit on unix
// socket paths.
//
// Hand-written parts, and why: the request and response structs (api.go)
// are written from the OpenAPI file rather than generated, because the
// driver uses a dozen fields of a description that spans hundreds, a
// generator would bring its own runtime and tool into the build, and the
// contract tests hold every body the driver sends, and every answer the
// test server gives, to the file itself. The HTTP client is net/http with
// a unix-socket dialer. The hybrid-vsock handshake is one line each way.
//
// Guest crashes: cloud-hypervisor has no equivalent of QEMU's -no-reboot,
// so a guest that panics (panic=-1) is rebooted by cloud-hypervisor rather
// than ending the process; its new agent has no processes and the host's
// session breaks, which the caller sees as a lost container.
package cloudhypervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
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
	apiSocket   = "api.sock"
	apiLock     = "api.sock.lock"
	vsockSocket = "vsock.sock"
	pidFile     = "ch.pid"
	consoleLog  = "console.log"
	outputLog   = "ch.log"
	restoreDir  = "restore"
)

// Name is the driver's name.
const Name = "cloud-hypervisor"

// baseCmdline puts the console on the serial port and reboots at once on
// a panic (see the package doc for what cloud-hypervisor makes of that),
// then has what every husk guest boots with.
const baseCmdline = "console=ttyS0 panic=-1 quiet " + kernel.BootArgs

// guestCID is the guest's vsock CID. Each VM has its own hybrid-vsock
// device with no host vsock behind it, so every guest can use the first
// CID a guest may have.
const guestCID = 3

// virtio-blk serials are at most 20 bytes (VIRTIO_BLK_ID_BYTES).
const maxSerial = 20

// Memory restore modes accepted in Options.RestoreMode.
const (
	// RestoreModeCopy reads the whole snapshot memory before resuming.
	RestoreModeCopy = "copy"
	// RestoreModeOnDemand maps the snapshot memory and faults pages in
	// through userfaultfd as the guest touches them.
	RestoreModeOnDemand = "ondemand"
)

// Options configure the driver.
type Options struct {
	// Binary is the cloud-hypervisor executable; default
	// "cloud-hypervisor" from PATH.
	Binary string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// RestoreMode is RestoreModeCopy (default) or RestoreModeOnDemand.
	RestoreMode string
	// MaxCPUs is the vCPU count a VM may be resized to; default its boot
	// count.
	MaxCPUs int
	// MemoryHotplugMiB is memory a VM may grow by through Resize.
	MemoryHotplugMiB int
	// AgentAttemptTimeout bounds one hybrid-vsock connection attempt in
	// DialAgent; default 3s. Attempts repeat until DialAgent's ctx ends.
	AgentAttemptTimeout time.Duration
}

// Driver starts cloud-hypervisor VMs.
type Driver struct {
	opts Options
	log  *slog.Logger
}

var _ vmm.Driver = (*Driver)(nil)

// New returns a cloud-hypervisor driver. It fails only on bad options.
func New(opts Options) (*Driver, error) {
	if opts.Binary == "" {
		opts.Binary = "cloud-hypervisor"
	}
	switch opts.RestoreMode {
	case "":
		opts.RestoreMode = RestoreModeCopy
	case RestoreModeCopy, RestoreModeOnDemand:
	default:
		return nil, fmt.Errorf("cloud-hypervisor restore mode %q: want %s or %s: %w",
			opts.RestoreMode, RestoreModeCopy, RestoreModeOnDemand, errdefs.ErrInvalidArgument)
	}
	if opts.MaxCPUs < 0 || opts.MemoryHotplugMiB < 0 {
		return nil, fmt.Errorf("cloud-hypervisor: negative MaxCPUs or MemoryHotplugMiB: %w", errdefs.ErrInvalidArgument)
	}
	if opts.AgentAttemptTimeout <= 0 {
		opts.AgentAttemptTimeout = 3 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Driver{opts: opts, log: log}, nil
}

// OnDemand is d restoring snapshots with RestoreModeOnDemand: a restore
// reads no memory up front, and the snapshot's memory file must stay
// while the VM runs (as a template's does).
func (d *Driver) OnDemand() *Driver {
	opts := d.opts
	opts.RestoreMode = RestoreModeOnDemand
	return &Driver{opts: opts, log: d.log}
}

// Name implements vmm.Driver.
func (d *Driver) Name() string { return Name }

// Version implements vmm.Driver: "cloud-hypervisor v53.0" from the first
// line of `cloud-hypervisor --version`.
func (d *Driver) Version(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, d.opts.Binary, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", d.opts.Binary, err)
	}
	v, err := parseVersion(string(out))
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", d.opts.Binary, err)
	}
	return v, nil
}

// parseVersion reads "cloud-hypervisor v53.0" (or a git-describe build
// version such as "v53.0-12-gabcdef") into "cloud-hypervisor <version>".
func parseVersion(out string) (string, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != Name {
		return "", fmt.Errorf("unexpected version output %q", line)
	}
	return versionString(f[1]), nil
}

// versionString is how a build version is recorded and compared.
func versionString(build string) string {
	if build != "" && build[0] >= '0' && build[0] <= '9' {
		build = "v" + build
	}
	return Name + " " + build
}

// Start implements vmm.Driver. It returns once the VM is booted; the
// guest is still starting then.
func (d *Driver) Start(ctx context.Context, cfg vmm.Config) (vmm.Machine, error) {
	if err := validate(cfg); err != nil {
		return nil, err
	}
	if cfg.FileMemory {
		return nil, fmt.Errorf("vm %s: file-backed memory: %w", cfg.ID, errdefs.ErrNotImplemented)
	}
	vc, err := d.vmConfig(cfg)
	if err != nil {
		return nil, err
	}
	m, err := d.launch(ctx, cfg.ID, cfg.Dir)
	if err != nil {
		return nil, err
	}
	err = m.api.put(ctx, "vm.create", vc)
	if err == nil {
		err = m.api.put(ctx, "vm.boot", nil)
	}
	if err != nil {
		m.abort()
		return nil, fmt.Errorf("start vm %s: %w", cfg.ID, err)
	}
	return m, nil
}

// launch starts a cloud-hypervisor process in dir and waits for its API.
func (d *Driver) launch(ctx context.Context, id, dir string) (*Machine, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("vm dir: %w", err)
	}
	if pid, err := vmmproc.ReadPID(dir, pidFile); err == nil && isOurs(pid, dir) {
		return nil, fmt.Errorf("start vm %s: cloud-hypervisor %d already runs in %s: %w", id, pid, dir, errdefs.ErrConflict)
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
	out, err := os.OpenFile(filepath.Join(dir, outputLog), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		dirFD.Close()
		return nil, fmt.Errorf("create cloud-hypervisor log: %w", err)
	}
	args := []string{"--api-socket", "path=" + apiSocket}
	// Not CommandContext: the VMM must outlive the request and the daemon.
	cmd := exec.Command(d.opts.Binary, args...)
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	out.Close()
	if err != nil {
		dirFD.Close()
		return nil, fmt.Errorf("start %s: %w", d.opts.Binary, err)
	}
	log := d.log.With("vm", id, "pid", cmd.Process.Pid)
	log.Debug("cloud-hypervisor started", "args", args)
	m := d.newMachine(dir, dirFD, cmd.Process.Pid, log)
	m.signal = func(sig syscall.Signal) error { return cmd.Process.Signal(sig) }
	go func() {
		err := cmd.Wait()
		log.Debug("cloud-hypervisor exited", "status", err)
		m.exited()
	}()
	if err := vmmproc.WriteFileAtomic(filepath.Join(dir, pidFile), []byte(strconv.Itoa(m.pid)+"\n")); err != nil {
		m.abort()
		return nil, err
	}
	if err := m.waitAPI(ctx); err != nil {
		m.abort()
		return nil, fmt.Errorf("start vm %s: %w", id, err)
	}
	return m, nil
}

// waitAPI polls vmm.ping until cloud-hypervisor serves its API.
func (m *Machine) waitAPI(ctx context.Context) error {
	for {
		var ping VmmPingResponse
		err := m.api.get(ctx, "vmm.ping", &ping)
		if err == nil {
			return nil
		}
		select {
		case <-m.done:
			return fmt.Errorf("cloud-hypervisor exited during start: %s", vmmproc.OutputTail(filepath.Join(m.dir, outputLog)))
		case <-ctx.Done():
			return fmt.Errorf("wait for cloud-hypervisor api: %w (last: %v)", ctx.Err(), err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// vmConfig is the vm.create body for cfg.
func (d *Driver) vmConfig(cfg vmm.Config) (*VmConfig, error) {
	abs := func(p string) (string, error) {
		a, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("vm %s: path %s: %w", cfg.ID, p, err)
		}
		return a, nil
	}
	kernelPath, err := abs(cfg.Kernel)
	if err != nil {
		return nil, err
	}
	initrd, err := abs(cfg.Initramfs)
	if err != nil {
		return nil, err
	}
	mem := cfg.MemoryMiB
	if mem == 0 {
		mem = 256
	}
	cpus := max(cfg.CPUs, 1)
	cmdline := baseCmdline
	if c := strings.TrimSpace(cfg.Cmdline); c != "" {
		cmdline += " " + c
	}
	vc := &VmConfig{
		CPUs:    &CpusConfig{BootVCPUs: cpus, MaxVCPUs: max(cpus, d.opts.MaxCPUs)},
		Memory:  &MemoryConfig{Size: int64(mem) << 20, HotplugSize: int64(d.opts.MemoryHotplugMiB) << 20},
		Payload: PayloadConfig{Kernel: kernelPath, Initramfs: initrd, Cmdline: cmdline},
		Rng:     &RngConfig{Src: "/dev/urandom"},
		Serial:  &SerialConfig{Mode: ModeFile, File: consoleLog},
		Console: &ConsoleConfig{Mode: ModeOff},
		Vsock:   &VsockConfig{CID: guestCID, Socket: vsockSocket},
	}
	for i, dk := range cfg.Disks {
		p, err := abs(dk.Path)
		if err != nil {
			return nil, err
		}
		vc.Disks = append(vc.Disks, DiskConfig{Path: p, Readonly: dk.ReadOnly, Serial: dk.Serial, ID: fmt.Sprintf("disk%d", i)})
	}
	for i, n := range cfg.Nets {
		vc.Net = append(vc.Net, NetConfig{Tap: n.Tap, MAC: n.MAC, ID: fmt.Sprintf("net%d", i)})
	}
	for i, sh := range cfg.Shares {
		sock, err := abs(sh.Socket)
		if err != nil {
			return nil, err
		}
		vc.Fs = append(vc.Fs, FsConfig{Tag: sh.Tag, Socket: sock, NumQueues: 1, QueueSize: 1024, ID: fmt.Sprintf("fs%d", i)})
	}
	if len(cfg.Shares) > 0 {
		vc.Memory.Shared = true
	}
	return vc, nil
}

func validate(cfg vmm.Config) error {
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
	case cfg.Accel != "" && cfg.Accel != "kvm":
		return bad("cloud-hypervisor runs only on KVM, not %q", cfg.Accel)
	}
	for _, dk := range cfg.Disks {
		if dk.Removable {
			return fmt.Errorf("vm %s: cloud-hypervisor has no removable disks: %w", cfg.ID, errdefs.ErrNotImplemented)
		}
		if dk.Path == "" {
			return bad("disk without a path")
		}
		if len(dk.Serial) > maxSerial {
			return bad("disk serial %q longer than %d bytes", dk.Serial, maxSerial)
		}
	}
	for _, n := range cfg.Nets {
		if n.Tap == "" {
			return bad("network interface without a TAP")
		}
	}
	for _, sh := range cfg.Shares {
		if sh.Tag == "" || sh.Socket == "" {
			return bad("virtio-fs share without a tag or socket")
		}
	}
	if st, err := os.Stat(cfg.Dir); err != nil || !st.IsDir() {
		return bad("directory %s does not exist", cfg.Dir)
	}
	return nil
}

// Reattach implements vmm.Driver: it finds the cloud-hypervisor a previous
// Start or Restore left in dir, checks it is still that process (its
// working directory is dir and it serves api.sock), and confirms its API
// answers. The error wraps errdefs.ErrNotFound when no such process runs.
func (d *Driver) Reattach(ctx context.Context, dir string) (vmm.Machine, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("vm dir: %w", err)
	}
	pid, pidfd, err := vmmproc.FindRecorded(dir, pidFile, "cloud-hypervisor", func(pid int) bool { return isOurs(pid, dir) })
	if err != nil {
		return nil, err
	}
	dirFD, err := vmmproc.OpenDir(dir)
	if err != nil {
		unix.Close(pidfd)
		return nil, err
	}
	log := d.log.With("dir", dir, "pid", pid)
	m := d.newMachine(dir, dirFD, pid, log)
	m.pidfd = pidfd
	m.signal = func(sig syscall.Signal) error { return unix.PidfdSendSignal(pidfd, sig, nil, 0) }
	// Check the API before the exit waiter starts, so a failure here can
	// close the pidfd without a goroutine still polling it.
	if _, err := m.Info(ctx); err != nil {
		m.releaseFDs()
		return nil, fmt.Errorf("reattach %s: %w", dir, err)
	}
	go func() {
		vmmproc.WaitPidfd(pidfd)
		log.Debug("cloud-hypervisor exited")
		m.exited()
	}()
	return m, nil
}

// isOurs checks that pid runs in dir with this driver's API socket
// arguments. The executable's name is not checked: it is whatever
// Options.Binary names.
func isOurs(pid int, dir string) bool {
	cmdline, ok := vmmproc.CmdlineIn(pid, dir)
	if !ok {
		return false
	}
	return bytes.Contains(cmdline, []byte("\x00--api-socket\x00path="+apiSocket+"\x00"))
}

func removeRuntimeFiles(dir string) error {
	for _, name := range []string{apiSocket, apiLock, vsockSocket, pidFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", name, err)
		}
	}
	// Listeners cloud-hypervisor made for guest-initiated vsock
	// connections ("vsock.sock_<port>").
	extra, _ := filepath.Glob(filepath.Join(dir, vsockSocket+"_*"))
	for _, p := range extra {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", filepath.Base(p), err)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, restoreDir)); err != nil {
		return fmt.Errorf("remove %s: %w", restoreDir, err)
	}
	return nil
}

// Machine is one cloud-hypervisor process, started, restored or
// reattached.
type Machine struct {
	pid    int
	dir    string
	log    *slog.Logger
	drv    *Driver
	api    *client
	signal func(syscall.Signal) error
	done   chan struct{}

	mu    sync.Mutex
	dirFD *os.File
	// pidfd is set for reattached machines; -1 otherwise.
	pidfd int
}

var _ vmm.Machine = (*Machine)(nil)

func (d *Driver) newMachine(dir string, dirFD *os.File, pid int, log *slog.Logger) *Machine {
	m := &Machine{pid: pid, dir: dir, dirFD: dirFD, log: log, drv: d, done: make(chan struct{}), pidfd: -1}
	m.api = newClient(func() string { return m.path(apiSocket) })
	return m
}

func (m *Machine) exited() { close(m.done) }

// abort ends a machine whose start failed and removes what it made.
func (m *Machine) abort() {
	if err := m.Kill(); err != nil {
		m.log.Warn("kill cloud-hypervisor after failed start", "err", err)
	}
	if err := m.Cleanup(); err != nil {
		m.log.Warn("clean up after failed start", "err", err)
	}
}

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

// Dir is the VM's directory.
func (m *Machine) Dir() string { return m.dir }

// running reports an error when the process has exited.
func (m *Machine) running(what string) error {
	select {
	case <-m.done:
		return fmt.Errorf("%s: cloud-hypervisor %d has exited: %w", what, m.pid, errdefs.ErrFailedPrecondition)
	default:
		return nil
	}
}

// DialAgent implements vmm.Machine over the hybrid vsock: see
// DialHybridVsock. It retries until ctx ends, as the guest agent may not
// listen yet.
func (m *Machine) DialAgent(ctx context.Context) (net.Conn, error) {
	if err := m.running("dial agent"); err != nil {
		return nil, err
	}
	// Stop retrying when the VMM goes away.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-m.done:
			cancel()
		case <-stop:
		}
	}()
	c, err := DialHybridVsock(ctx, m.path(vsockSocket), proto.VsockPort, m.drv.opts.AgentAttemptTimeout)
	if err != nil {
		if rerr := m.running("dial agent"); rerr != nil {
			return nil, rerr
		}
		return nil, fmt.Errorf("dial agent: %w", err)
	}
	return c, nil
}

// Info returns vm.info.
func (m *Machine) Info(ctx context.Context) (*VmInfo, error) {
	var info VmInfo
	if err := m.api.get(ctx, "vm.info", &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Ping returns vmm.ping: the running process's version and features.
func (m *Machine) Ping(ctx context.Context) (*VmmPingResponse, error) {
	var p VmmPingResponse
	if err := m.api.get(ctx, "vmm.ping", &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Counters returns vm.counters: per device, its I/O counters.
func (m *Machine) Counters(ctx context.Context) (Counters, error) {
	var c Counters
	if err := m.api.get(ctx, "vm.counters", &c); err != nil {
		return nil, err
	}
	return c, nil
}

// Resize changes the VM's vCPU count and memory (in MiB) through
// vm.resize; zero keeps that one as it is. Growth beyond what the VM was
// created with needs Options.MaxCPUs and Options.MemoryHotplugMiB.
func (m *Machine) Resize(ctx context.Context, cpus, memoryMiB int) error {
	if cpus < 0 || memoryMiB < 0 || (cpus == 0 && memoryMiB == 0) {
		return fmt.Errorf("resize vm to %d cpus, %d MiB: %w", cpus, memoryMiB, errdefs.ErrInvalidArgument)
	}
	if err := m.api.put(ctx, "vm.resize", &VmResize{DesiredVCPUs: cpus, DesiredRAM: int64(memoryMiB) << 20}); err != nil {
		return fmt.Errorf("resize vm: %w", err)
	}
	return nil
}

// Pause implements vmm.Machine through vm.pause; a paused VM stays paused
// without an error.
func (m *Machine) Pause(ctx context.Context) error {
	return m.setRunning(ctx, false)
}

// Resume implements vmm.Machine through vm.resume; a running VM is left
// alone.
func (m *Machine) Resume(ctx context.Context) error {
	return m.setRunning(ctx, true)
}

func (m *Machine) setRunning(ctx context.Context, run bool) error {
	endpoint, want := "vm.pause", StatePaused
	if run {
		endpoint, want = "vm.resume", StateRunning
	}
	info, err := m.Info(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	if info.State == want {
		return nil
	}
	if err := m.api.put(ctx, endpoint, nil); err != nil {
		return err
	}
	return nil
}

// Shutdown implements vmm.Machine: vm.shutdown, then vmm.shutdown, and
// waits for the process to exit. The guest gets no say; use the agent for
// a guest-side shutdown.
func (m *Machine) Shutdown(ctx context.Context) error {
	select {
	case <-m.done:
		return nil
	default:
	}
	// vm.shutdown stops the guest; when it refuses (the VM is not booted,
	// or already shut down) vmm.shutdown still ends the process, which is
	// what counts.
	if err := m.api.put(ctx, "vm.shutdown", nil); err != nil {
		m.log.Debug("vm.shutdown refused", "err", err)
	}
	err := m.api.put(ctx, "vmm.shutdown", nil)
	var ae *APIError
	if errors.As(err, &ae) {
		return fmt.Errorf("shut down cloud-hypervisor: %w", err)
	}
	// The VMM may close the connection before its answer arrives, so only
	// a refusal counts as failure; otherwise the exit decides.
	if err := m.Wait(ctx); err != nil {
		return fmt.Errorf("shut down cloud-hypervisor %d: %w", m.pid, err)
	}
	return nil
}

// Kill implements vmm.Machine: SIGKILL, then wait for the process to go.
func (m *Machine) Kill() error {
	return vmmproc.Kill("cloud-hypervisor", m.pid, m.done, m.signal)
}

// Wait implements vmm.Machine. It returns nil once the process has
// exited, whatever its status.
func (m *Machine) Wait(ctx context.Context) error {
	return vmmproc.WaitDone(ctx, m.done)
}

// Cleanup implements vmm.Machine. It removes the sockets, the pid file
// and the restore directory; console.log and ch.log stay for the caller
// to read or remove with the directory. It refuses while the process
// still runs.
func (m *Machine) Cleanup() error {
	select {
	case <-m.done:
	default:
		return fmt.Errorf("cleanup: cloud-hypervisor %d still running: %w", m.pid, errdefs.ErrFailedPrecondition)
	}
	m.api.close()
	m.releaseFDs()
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
