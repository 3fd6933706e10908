// Package virtiofs runs the virtiofsd processes that serve host files to a
// VM: one per shared directory or file, each on a vhost-user socket in the
// VM's directory, outliving the daemon as the VMM does.
//
// Every virtiofsd is started through a small re-executed helper (this
// binary, argv[0] helperArg0; see Reexec) in a private mount namespace. The
// helper bind-mounts the source onto a staging directory in the VM's
// directory and then execs virtiofsd on that staging directory. This is how
// two things are done that Debian's C virtiofsd (QEMU 7.2) cannot do
// itself:
//
//   - read-only shares: virtiofsd has no read-only option, so the helper
//     makes the bind mount read-only (recursively, with mount_setattr).
//     The kernel then refuses every write whatever the guest sends, and
//     virtiofsd's own sandbox (a further mount namespace and pivot_root
//     into the share, under a seccomp filter that has no mount calls)
//     cannot undo it.
//   - single files: virtio-fs shares directories, so a file is bound onto
//     a file in a small read-only tmpfs, and only that file is shared;
//     its siblings on the host stay out of the guest's reach.
//
// The mounts exist only in the helper's namespace: nothing appears in the
// host's mount table, and they vanish with virtiofsd, however it ends.
//
// huskd creates the listening socket itself and passes it (--fd), so the
// VMM can connect as soon as Start returns. virtiofsd serves one
// connection and exits when the VMM closes it; Stop only waits for that
// (and kills after a grace period).
package virtiofs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
)

// DefaultBinary is where Debian's qemu-system-common puts virtiofsd.
const DefaultBinary = "/usr/lib/qemu/virtiofsd"

// helperArg0 marks the re-executed helper in its argv[0].
const helperArg0 = "husk-virtiofsd-helper"

// listenFD is the descriptor number of the socket passed to virtiofsd.
const listenFD = 3

// Share is one host path to serve.
type Share struct {
	// Name is unique within the VM directory ("fs0"); it names the
	// socket (Name.sock), the pid file (Name.pid), the staging directory
	// (Name.root) and the log (Name.log).
	Name string
	// Source is the host directory or file to share; a file is shared as
	// the only entry of its share, named FileName.
	Source   string
	ReadOnly bool
}

// FileName is the name under which a shared file appears in its share.
const FileName = "file"

// Options configure Start.
type Options struct {
	// Binary is virtiofsd; default DefaultBinary.
	Binary string
	// Self is the executable that runs the helper (it must call Reexec
	// first in main); default /proc/self/exe.
	Self   string
	Logger *slog.Logger
}

// Server is one running virtiofsd.
type Server struct {
	name   string
	dir    string
	pid    int
	pidfd  int
	done   chan struct{}
	log    *slog.Logger
	socket string
}

// Socket is the vhost-user socket's absolute path.
func (s *Server) Socket() string { return s.socket }

// PID is virtiofsd's process ID.
func (s *Server) PID() int { return s.pid }

// Start launches virtiofsd for share in dir (the VM's directory) and
// returns once its socket accepts connections. On error nothing is left
// running or on disk.
func Start(ctx context.Context, dir string, share Share, opts Options) (_ *Server, err error) {
	if opts.Binary == "" {
		opts.Binary = DefaultBinary
	}
	if opts.Self == "" {
		opts.Self = "/proc/self/exe"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if share.Name == "" || strings.ContainsAny(share.Name, "/\x00") {
		return nil, fmt.Errorf("share name %q: must be a plain file name", share.Name)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("share %s: %w", share.Name, err)
	}
	st, err := os.Stat(share.Source)
	if err != nil {
		return nil, fmt.Errorf("share %s: source: %w", share.Name, err)
	}
	kind := "dir"
	if !st.IsDir() {
		kind = "file"
	}
	if err := removeFiles(dir, share.Name); err != nil {
		return nil, err
	}
	staging := filepath.Join(dir, share.Name+".root")
	if err := os.Mkdir(staging, 0o700); err != nil {
		return nil, fmt.Errorf("share %s: create staging dir: %w", share.Name, err)
	}
	defer func() {
		if err != nil {
			_ = removeFiles(dir, share.Name)
		}
	}()
	ln, err := listen(dir, share.Name+".sock")
	if err != nil {
		return nil, fmt.Errorf("share %s: %w", share.Name, err)
	}
	defer ln.Close()
	logf, err := os.OpenFile(filepath.Join(dir, share.Name+".log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("share %s: create log: %w", share.Name, err)
	}
	defer logf.Close()

	ro := "rw"
	if share.ReadOnly {
		ro = "ro"
	}
	args := []string{helperArg0, opts.Binary, share.Source, staging, kind, ro, "--",
		"--fd=" + strconv.Itoa(listenFD), "-o", "source=" + staging,
		"-o", "cache=auto", "-o", "sandbox=namespace", "-o", "log_level=warn",
	}
	cmd := &exec.Cmd{
		Path: opts.Self, Args: args, Dir: dir, Stdout: logf, Stderr: logf,
		ExtraFiles: []*os.File{ln},
		// Its own session, so it survives the daemon as the VMM does; its
		// own mount namespace (Go makes it private before the exec), so
		// its bind mounts touch nothing else.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true, Unshareflags: unix.CLONE_NEWNS},
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("share %s: start virtiofsd: %w", share.Name, err)
	}
	pid := cmd.Process.Pid
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("share %s: pidfd: %w", share.Name, err)
	}
	s := &Server{name: share.Name, dir: dir, pid: pid, pidfd: pidfd, done: make(chan struct{}),
		log: opts.Logger.With("share", share.Name, "pid", pid), socket: filepath.Join(dir, share.Name+".sock")}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	defer func() {
		if err != nil {
			s.kill()
			<-s.done
			unix.Close(s.pidfd)
		}
	}()
	if err := vmmproc.WriteFileAtomic(filepath.Join(dir, share.Name+".pid"), []byte(strconv.Itoa(pid)+"\n")); err != nil {
		return nil, fmt.Errorf("share %s: %w", share.Name, err)
	}
	if err := s.waitReady(ctx, staging); err != nil {
		return nil, fmt.Errorf("share %s: %w", share.Name, err)
	}
	return s, nil
}

// waitReady waits until the helper has exec'd virtiofsd: only then are
// the staging mounts in place, and a VMM connecting earlier would still
// be served, but by a virtiofsd that may yet fail to start.
func (s *Server) waitReady(ctx context.Context, staging string) error {
	for {
		if isOurs(s.pid, staging) {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("virtiofsd exited during start: %s", tailFile(filepath.Join(s.dir, s.name+".log")))
		case <-ctx.Done():
			return fmt.Errorf("wait for virtiofsd: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Find returns the virtiofsd a Start in dir left running under name (for
// example before a daemon restart), or an error wrapping os.ErrNotExist.
func Find(dir, name string, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, name+".pid"))
	if err != nil {
		return nil, fmt.Errorf("share %s: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("share %s: bad pid file: %w", name, os.ErrNotExist)
	}
	// The pidfd first: the identity check is then about the process it
	// refers to, not a later one that reused the pid.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("share %s: virtiofsd %d: %w: %w", name, pid, err, os.ErrNotExist)
	}
	if !isOurs(pid, filepath.Join(dir, name+".root")) {
		unix.Close(pidfd)
		return nil, fmt.Errorf("share %s: process %d is not its virtiofsd: %w", name, pid, os.ErrNotExist)
	}
	s := &Server{name: name, dir: dir, pid: pid, pidfd: pidfd, done: make(chan struct{}),
		log: log.With("share", name, "pid", pid), socket: filepath.Join(dir, name+".sock")}
	go func() {
		vmmproc.WaitPidfd(pidfd)
		close(s.done)
	}()
	return s, nil
}

// Names lists the shares Start left in dir: those with both a pid file
// and a staging directory.
func Names(dir string) []string {
	matches, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	var names []string
	for _, m := range matches {
		name := strings.TrimSuffix(filepath.Base(m), ".pid")
		if st, err := os.Stat(filepath.Join(dir, name+".root")); err == nil && st.IsDir() {
			names = append(names, name)
		}
	}
	return names
}

// Stop waits up to grace for virtiofsd to exit (it does once the VMM has
// closed its connection), kills it otherwise, and removes its files.
func (s *Server) Stop(grace time.Duration) error {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.log.Warn("virtiofsd did not exit after its VMM; killing it")
		s.kill()
		<-s.done
	}
	unix.Close(s.pidfd)
	return removeFiles(s.dir, s.name)
}

// Kill ends virtiofsd at once and removes its files.
func (s *Server) Kill() error {
	s.kill()
	return s.Stop(0)
}

func (s *Server) kill() {
	if err := unix.PidfdSendSignal(s.pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		s.log.Warn("kill virtiofsd", "err", err)
	}
}

// isOurs checks that pid is a virtiofsd serving staging.
func isOurs(pid int, staging string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	return len(argv) > 0 && filepath.Base(argv[0]) == "virtiofsd" &&
		strings.Contains(string(b), "\x00source="+staging+"\x00")
}

// removeFiles removes what Start creates for name in dir.
func removeFiles(dir, name string) error {
	var errs []error
	for _, suffix := range []string{".sock", ".pid", ".log"} {
		if err := os.Remove(filepath.Join(dir, name+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	// The staging directory is empty on the host: the mounts over it
	// lived in the helper's namespace only.
	if err := os.Remove(filepath.Join(dir, name+".root")); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove files of share %s: %w", name, err)
	}
	return nil
}

// listen makes the listening vhost-user socket name in dir, reached
// through /proc/self/fd so that a long dir still fits a socket address.
func listen(dir, name string) (*os.File, error) {
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(dirfd)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	addr := &unix.SockaddrUnix{Name: "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name}
	if err := unix.Bind(fd, addr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", filepath.Join(dir, name), err)
	}
	// Only root (the VMM before it drops privileges) may connect.
	if err := os.Chmod(filepath.Join(dir, name), 0o600); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("chmod %s: %w", name, err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen on %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

func tailFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "no output: " + err.Error()
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 1000 {
		s = s[len(s)-1000:]
	}
	if s == "" {
		return "no output"
	}
	return s
}
