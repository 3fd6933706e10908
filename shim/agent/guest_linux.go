//go:build linux

package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// Boot prepares the guest for the agent when it runs as /init: the kernel
// filesystems, the loopback interface and the kernel modules listed in
// modulesOrder (one path per line, loaded in order). A failing module is
// logged, not fatal: the agent may still reach the host.
func Boot(ctx context.Context, log *slog.Logger, modulesOrder string) error {
	mounts := []struct {
		target, fstype string
		flags          uintptr
		data           string
	}{
		{"/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666"},
		{"/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
		{"/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", m.target, err)
		}
		err := unix.Mount(m.fstype, m.target, m.fstype, m.flags, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	// Before any interface is up, so none gets an IPv6 address.
	if err := disableIPv6("/proc/sys"); err != nil {
		log.Error("disable IPv6", "err", err)
	}
	if err := overcommitAlways("/proc/sys"); err != nil {
		log.Error("set the guest's overcommit policy", "err", err)
	}
	if err := containerRlimits(); err != nil {
		log.Error("set the default resource limits", "err", err)
	}
	if err := loopbackUp(); err != nil {
		log.Error("bring up lo", "err", err)
	}
	loadModules(ctx, log, modulesOrder)
	if manualSCSIScan("/sys") {
		if n, err := scanSCSIHosts("/sys"); err != nil {
			log.Error("scan SCSI hosts", "err", err)
		} else {
			log.Debug("scanned SCSI hosts", "devices", n)
		}
	}
	return nil
}

// disableIPv6 turns IPv6 off on every interface, present and to come, as
// dockerd does in a container whose networks have no IPv6 (husk's never
// do): no link-local addresses, no ::1 on lo, and none of the router
// solicitations, duplicate address detection and multicast reports that
// bringing a link up would otherwise cost the guest's CPU. A --sysctl
// applied at setup may turn it back on, as with runc.
func disableIPv6(procSys string) error {
	var errs []error
	for _, scope := range []string{"all", "default"} {
		p := filepath.Join(procSys, "net/ipv6/conf", scope, "disable_ipv6")
		if err := os.WriteFile(p, []byte("1"), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// overcommitAlways lets the guest's allocations always succeed. A
// container under runc allocates against the host's memory, which the
// kernel's heuristic seldom refuses, and meets --memory only as its
// cgroup's OOM kill (exit 137, OOMKilled), the way programs and tests
// expect to. A guest has a VM's few hundred MiB, so the heuristic would
// refuse a large allocation outright (malloc failing) long before.
func overcommitAlways(procSys string) error {
	return os.WriteFile(filepath.Join(procSys, "vm/overcommit_memory"), []byte("1"), 0)
}

// loopbackUp sets IFF_UP on lo; the kernel configures 127.0.0.1 itself.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set flags: %w", err)
	}
	return nil
}

func loadModules(ctx context.Context, log *slog.Logger, orderFile string) {
	f, err := os.Open(orderFile)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		log.Error("read module list", "err", err)
		return
	}
	defer f.Close()
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		log.Error("read kernel command line", "err", err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() && ctx.Err() == nil {
		path := strings.TrimSpace(sc.Text())
		if path == "" || strings.HasPrefix(path, "#") {
			continue
		}
		if err := loadModule(path, moduleArgs(string(cmdline), moduleName(path))); err != nil {
			log.Error("load kernel module", "path", path, "err", err)
		}
	}
}

func loadModule(path, args string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	err = unix.FinitModule(int(f.Fd()), args, 0)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("finit_module: %w", err)
	}
	return nil
}

// FindSerialPort waits until the virtio-serial port called name appears and
// returns its device path.
func FindSerialPort(ctx context.Context, name string) (string, error) {
	for {
		matches, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, m := range matches {
			b, err := os.ReadFile(m)
			if err != nil || strings.TrimSpace(string(b)) != name {
				continue
			}
			dev := "/dev/" + filepath.Base(filepath.Dir(m))
			if _, err := os.Stat(dev); err == nil {
				return dev, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("wait for virtio-serial port %q: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SerialListener yields sessions over a virtio-serial port. The port stays
// open for the agent's lifetime (closing it would discard what the host has
// queued), and a session is handed out only once the host side is
// connected: while it is not, the Linux driver reports POLLHUP and read
// returns 0, which a session would take for the end of the stream.
type SerialListener struct {
	Path string
	// Name, when Path is empty, is the port's name: Accept first waits
	// for it to appear (under cloud-hypervisor it never does).
	Name string
	// Interval between checks for a host connection; default 50ms.
	Interval time.Duration

	mu sync.Mutex
	f  *os.File
}

// Accept waits until the host is connected to the port. Closing the
// returned session interrupts its I/O but keeps the port open.
func (l *SerialListener) Accept(ctx context.Context) (io.ReadWriteCloser, error) {
	interval := l.Interval
	if interval <= 0 {
		interval = 50 * time.Millisecond
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Path == "" {
		p, err := FindSerialPort(ctx, l.Name)
		if err != nil {
			return nil, err
		}
		l.Path = p
	}
	for l.f == nil {
		// O_NONBLOCK puts the port under the Go poller, so deadlines can
		// interrupt a session stuck writing to an absent host.
		f, err := os.OpenFile(l.Path, os.O_RDWR|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err == nil {
			l.f = f
			break
		}
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("open %s: %w", l.Path, err)
		}
		if err := sleepCtx(ctx, interval); err != nil {
			return nil, err
		}
	}
	// Lift the previous session's interruption.
	if err := l.f.SetDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("reset %s: %w", l.Path, err)
	}
	for {
		up, err := hostConnected(l.f)
		if err != nil {
			return nil, fmt.Errorf("poll %s: %w", l.Path, err)
		}
		if up {
			return portSession{l.f}, nil
		}
		if err := sleepCtx(ctx, interval); err != nil {
			return nil, err
		}
	}
}

// Close closes the port.
func (l *SerialListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// portSession is one session's use of the port.
type portSession struct{ f *os.File }

func (p portSession) Read(b []byte) (int, error)  { return p.f.Read(b) }
func (p portSession) Write(b []byte) (int, error) { return p.f.Write(b) }

// Close unblocks the session's pending reads and writes.
func (p portSession) Close() error { return p.f.SetDeadline(time.Unix(1, 0)) }

func hostConnected(f *os.File) (bool, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var revents int16
	var perr error
	err = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, perr = unix.Poll(fds, 0)
			if perr != unix.EINTR {
				break
			}
		}
		revents = fds[0].Revents
	})
	if err != nil {
		return false, err
	}
	if perr != nil {
		return false, perr
	}
	return revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) == 0, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// VsockListener yields one session per vsock connection to a port.
type VsockListener struct {
	fd int
}

// ListenVsock listens on port for connections from the host.
func ListenVsock(port uint32) (*VsockListener, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("vsock socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind vsock port %d: %w", port, err)
	}
	if err := unix.Listen(fd, 4); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen on vsock port %d: %w", port, err)
	}
	return &VsockListener{fd: fd}, nil
}

// Accept waits for the next connection. A blocking accept cannot be
// interrupted by ctx; Close the listener to end it.
func (l *VsockListener) Accept(ctx context.Context) (io.ReadWriteCloser, error) {
	for {
		nfd, _, err := unix.Accept4(l.fd, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("accept vsock: %w", err)
		}
		if ctx.Err() != nil {
			unix.Close(nfd)
			return nil, ctx.Err()
		}
		return os.NewFile(uintptr(nfd), "vsock"), nil
	}
}

// Close stops listening.
func (l *VsockListener) Close() error { return unix.Close(l.fd) }

// GuestRootfs builds the container root from the VM's disks: the image's
// base ext4 read-only, the container's upper ext4 read-write, and an
// overlay of the two with an init layer between them.
type GuestRootfs struct {
	// Dir holds base, upper and root; default /run/husk.
	Dir string
	// InitLayer and HideLostFound are the directories of the init layer
	// and of the lost+found whiteout that go between the base and the
	// writable layer (proto.InitLayerDir, proto.HideLostFoundDir), which
	// the initramfs carries. Empty, each setup builds them under Dir.
	InitLayer, HideLostFound string

	// mounted are the disks of the root mounted now; zero when none is.
	mounted rootDisks
}

// rootDisks are the serials of a root's base and upper disks.
type rootDisks struct{ base, upper string }

func (g *GuestRootfs) dir() string {
	if g.Dir == "" {
		return "/run/husk"
	}
	return g.Dir
}

// Mount finds the disks by serial, mounts them and the overlay, and sets
// the machine's hostname. A root of the same disks mounted already (by
// OpMountRoot, before an image template's snapshot) is the one returned.
func (g *GuestRootfs) Mount(ctx context.Context, spec proto.SetupSpec) (string, error) {
	want := rootDisks{spec.BaseSerial, spec.UpperSerial}
	switch g.mounted {
	case rootDisks{}:
	case want:
		if err := setHostname(spec.Hostname); err != nil {
			return "", err
		}
		return filepath.Join(g.dir(), "root"), nil
	default:
		return "", fmt.Errorf("mount root of disks %s and %s: the root of disks %s and %s is mounted", want.base, want.upper, g.mounted.base, g.mounted.upper)
	}
	base, err := findDisk(ctx, spec.BaseSerial)
	if err != nil {
		return "", err
	}
	upper, err := findDisk(ctx, spec.UpperSerial)
	if err != nil {
		return "", err
	}
	d := g.dir()
	baseDir, upperDir, rootDir := filepath.Join(d, "base"), filepath.Join(d, "upper"), filepath.Join(d, "root")
	for _, p := range []string{baseDir, upperDir, rootDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return "", fmt.Errorf("create %s: %w", p, err)
		}
	}
	// noload: a read-only base shared by many VMs must not replay its
	// journal.
	if err := whileAppearing(ctx, func() error { return unix.Mount(base, baseDir, "ext4", unix.MS_RDONLY, "noload") }); err != nil {
		return "", fmt.Errorf("mount base %s: %w", base, err)
	}
	// After the mount: a removable disk's first open after a new medium
	// re-reads it, which resets the read-ahead. Without it the container
	// only starts programs more slowly.
	_ = setReadAhead("/sys/block", base, baseReadAheadKB)
	if err := whileAppearing(ctx, func() error { return unix.Mount(upper, upperDir, "ext4", 0, "") }); err != nil {
		unix.Unmount(baseDir, 0)
		return "", fmt.Errorf("mount upper %s: %w", upper, err)
	}
	up, work := filepath.Join(upperDir, proto.UpperLayerDir), filepath.Join(upperDir, proto.UpperWorkDir)
	for _, p := range []string{up, work} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			g.unmount(baseDir, upperDir)
			return "", fmt.Errorf("create %s: %w", p, err)
		}
	}
	if err := g.buildInitDirs(); err != nil {
		g.unmount(baseDir, upperDir)
		return "", err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(g.lowerDirs(), ":"), up, work)
	if err := unix.Mount("overlay", rootDir, "overlay", 0, opts); err != nil {
		g.unmount(baseDir, upperDir)
		return "", fmt.Errorf("mount overlay: %w", err)
	}
	g.mounted = want
	if err := setHostname(spec.Hostname); err != nil {
		return "", err
	}
	return rootDir, nil
}

func setHostname(name string) error {
	if name == "" {
		return nil
	}
	if err := unix.Sethostname([]byte(name)); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	return nil
}

// Unmount releases the overlay and both disks.
func (g *GuestRootfs) Unmount(ctx context.Context) error {
	d := g.dir()
	g.mounted = rootDisks{}
	return g.unmount(filepath.Join(d, "root"), filepath.Join(d, "upper"), filepath.Join(d, "base"))
}

func (g *GuestRootfs) unmount(paths ...string) error {
	var errs []error
	for _, p := range paths {
		if err := unix.Unmount(p, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			// A busy mount is detached so the disk is at least synced.
			if err2 := unix.Unmount(p, unix.MNT_DETACH); err2 != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// baseReadAheadKB is the read-ahead of the image's base disk. Under TCG
// each request costs the guest's emulated CPU far more than the bytes
// cost QEMU to read from the host's page cache, so the base is read in
// large requests: busybox true exec'd from the base ran a median 117 ms
// with the kernel's 128 KiB, 83 ms with 2 MiB (cold starts, interleaved,
// 8 each). The base is read-only and shared, so the worst it costs is
// guest page cache.
const baseReadAheadKB = 2048

// setReadAhead sets the read-ahead of the block device dev (/dev/sda).
func setReadAhead(sysBlock, dev string, kb int) error {
	p := filepath.Join(sysBlock, filepath.Base(dev), "queue", "read_ahead_kb")
	if err := os.WriteFile(p, []byte(strconv.Itoa(kb)), 0); err != nil {
		return fmt.Errorf("set read-ahead of %s: %w", dev, err)
	}
	return nil
}

// findDisk returns the device (/dev/vdX or /dev/sdX) of the disk with the
// given serial, waiting briefly for it to appear.
func findDisk(ctx context.Context, serial string) (string, error) {
	if serial == "" {
		return "", errors.New("find disk: empty serial")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if dev := diskBySerial("/sys/block", serial); dev != "" {
			return "/dev/" + dev, nil
		}
		// Hot-plugged disks appear within tens of milliseconds.
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return "", fmt.Errorf("find disk with serial %q: %w", serial, err)
		}
	}
}

// PowerOff ends the machine.
func PowerOff() error {
	unix.Sync()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}
