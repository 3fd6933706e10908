//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// process is one container process and everything kept about it until
// OpForget.
type process struct {
	id  string
	pid int

	stdinMu sync.Mutex // one stdin attachment at a time
	// stdin is nil when the process has no stdin stream (any more).
	// Guarded by mu, not stdinMu: release must not wait for an attachment
	// blocked reading from the host.
	stdin *os.File

	stdout, stderr *output
	// tty is the master side of the process's terminal; nil without one.
	// Guarded by mu.
	tty *os.File

	mu      sync.Mutex
	exited  chan struct{} // closed once status is set
	status  proto.ExitStatus
	osProc  *os.Process
	release func()
	// ownUTS: the process got its own UTS namespace (a main process, not
	// an exec), so a new hostname must be set there.
	ownUTS bool
	// direct: the agent started the program itself (canExecDirectly);
	// otherwise the C init started it.
	direct bool
	// zygote: its init was the zygote (zygote_linux.go).
	zygote bool
}

// signal sends sig unless the process has already been reaped (its pid may
// then belong to someone else). A signal to an exited process is not an
// error: the host may race with the exit.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := unix.Kill(p.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %d to pid %d: %w", sig, p.pid, err)
	}
	return nil
}

// setExit records how the process ended; called by the reaper.
func (p *process) setExit(ws unix.WaitStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case ws.Signaled():
		p.status = proto.ExitStatus{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
	default:
		p.status = proto.ExitStatus{Code: ws.ExitStatus()}
	}
	close(p.exited)
	if p.osProc != nil {
		p.osProc.Release()
	}
}

// copyStdin feeds the host stream into the process's stdin. A clean end of
// the host stream closes stdin; a session that dies leaves it open for the
// next attachment.
func (p *process) copyStdin(src io.Reader, sess *yamux.Session) {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	f := p.stdinFile()
	if f == nil {
		return
	}
	_, err := io.Copy(f, src)
	if sess.IsClosed() {
		return
	}
	if err == nil || errors.Is(err, syscall.EPIPE) {
		p.mu.Lock()
		if p.stdin == f {
			f.Close()
			p.stdin = nil
		}
		p.mu.Unlock()
	}
}

func (p *process) stdinFile() *os.File {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdin
}

// startReaper collects exit statuses on SIGCHLD. Only the reaper waits for
// children, so no status is lost to a second waiter.
func startReaper(a *Agent) {
	signal.Notify(a.sigch, syscall.SIGCHLD)
	go func() {
		defer close(a.reapDone)
		defer signal.Stop(a.sigch)
		for {
			select {
			case <-a.sigch:
				a.reap()
			case <-a.stop:
				return
			}
		}
	}()
}

func (a *Agent) reap() {
	a.pmu.Lock()
	defer a.pmu.Unlock()
	var ws unix.WaitStatus
	if a.opts.ReapOrphans {
		for {
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				return
			}
			if p := a.byPid[pid]; p != nil {
				delete(a.byPid, pid)
				p.setExit(ws)
			}
		}
	}
	for pid, p := range a.byPid {
		wpid, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err != nil && err != unix.EINTR {
			// ECHILD: someone else reaped it; report it as killed
			// rather than leave waiters hanging.
			a.log.Error("wait for process", "pid", pid, "err", err)
			delete(a.byPid, pid)
			p.setExit(unix.WaitStatus(syscall.SIGKILL))
			continue
		}
		if wpid == pid {
			delete(a.byPid, pid)
			p.setExit(ws)
		}
	}
}

// initConfig describes a process to start: a main process (cinitStart, cinitRest), or
// an exec (startExecInit, execDirectly).
type initConfig struct {
	Root       string
	Hostname   string
	Domainname string
	// OomScoreAdj is every process's oom_score_adj (--oom-score-adj).
	OomScoreAdj int
	EtcDir      string
	Mounts      bool // set up /proc, /sys, /dev and /etc binds
	// Volumes says that the setup mounted volumes, binds or tmpfs into
	// Root, which a zygote's mount namespace, copied before, lacks.
	Volumes bool
	Process proto.ProcessSpec
	// ShmSize, ReadOnly and InitBinary carry the main process's share of
	// proto.ContainerSettings; InitBinary is the C init's own binary,
	// bound at dockerInitPath for --init, where it runs as tini does
	// (cinit/src/init.c).
	ShmSize    int64
	ReadOnly   bool
	InitBinary string
	Devices    []proto.Device
	// Privileged is proto.ContainerSettings': /sys and /sys/fs/cgroup
	// read-write (Devices holds the guest's devices then).
	Privileged bool
	// MaskedPaths and ReadonlyPaths are proto.ContainerSettings'.
	MaskedPaths, ReadonlyPaths []string
	// Exe, when set, is run instead of the program Process.Args[0] names
	// (OpWarm's /proc/self/exe).
	Exe string
	// LastCap is the kernel's last capability, up to which the bounding
	// set is dropped (lastCapability).
	LastCap int
	// Network, when set, is the network setup still under way: the init
	// does all it does before the program's exec, which waits for it.
	Network *netWait
}

// start launches spec as process id: a new PID namespace whose init is the
// user's program, or, for ExecOf, a process inside an existing one.
func (a *Agent) start(id string, spec proto.ProcessSpec) (*process, error) {
	if id == "" {
		return nil, &agentError{proto.KindInvalid, "start: missing process id"}
	}
	if len(spec.Args) == 0 {
		return nil, &agentError{proto.KindInvalid, "start: no command specified"}
	}
	a.mu.Lock()
	root, hostname, etcDir, settings, cgroup, network := a.root, a.hostname, a.etcDir, a.settings, a.cgroupDir, a.netPending
	volumes := a.mounts != nil && !a.mounts.empty()
	_, dup := a.procs[id]
	var target *process
	if spec.ExecOf != "" {
		target = a.procs[spec.ExecOf]
	}
	a.mu.Unlock()
	if root == "" {
		return nil, &agentError{proto.KindInvalid, "start: the container root is not set up"}
	}
	if dup {
		return nil, &agentError{proto.KindInvalid, fmt.Sprintf("start: process %s already exists", id)}
	}
	cfg := initConfig{Root: root, Hostname: hostname, EtcDir: etcDir, Mounts: true, Volumes: volumes, Process: spec, Network: network}
	if settings != nil {
		cfg.ShmSize, cfg.ReadOnly, cfg.Devices = settings.ShmSize, settings.ReadOnly, settings.Devices
		cfg.Domainname, cfg.OomScoreAdj = settings.Domainname, settings.OomScoreAdj
		cfg.MaskedPaths, cfg.ReadonlyPaths = settings.MaskedPaths, settings.ReadonlyPaths
		if settings.Privileged && spec.ExecOf == "" {
			devs, err := privilegedDevices(a.opts.Dev, settings.Devices)
			if err != nil {
				return nil, &agentError{proto.KindInternal, fmt.Sprintf("start %s: %v", id, err)}
			}
			cfg.Devices, cfg.Privileged = devs, true
		}
		if settings.Init {
			cfg.InitBinary = a.opts.InitExe
		}
	}
	var targetPid int
	if spec.ExecOf != "" {
		if target == nil {
			return nil, noProcess(spec.ExecOf)
		}
		if len(spec.Tmpfs) > 0 || len(spec.Binds) > 0 || spec.Staged != "" {
			return nil, &agentError{proto.KindInvalid, "start: an exec cannot have mounts of its own"}
		}
		select {
		case <-target.exited:
			return nil, &agentError{proto.KindInvalid, fmt.Sprintf("process %s is not running", spec.ExecOf)}
		default:
		}
		targetPid = target.pid
		// The target's root as its mount namespace sees it, with its /proc.
		cfg = initConfig{Root: "/proc/" + strconv.Itoa(targetPid) + "/root", Process: spec, OomScoreAdj: cfg.OomScoreAdj}
	}
	cfg.LastCap = a.lastCap

	stubs := mountStubs(root, spec)
	p, err := a.spawn(id, cfg, targetPid, cgroup)
	if err != nil {
		removeStubs(root, stubs, spec.Staged, a.log)
		return nil, err
	}
	if len(stubs) > 0 || spec.Staged != "" {
		release := p.release
		p.release = func() {
			release()
			removeStubs(root, stubs, spec.Staged, a.log)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.procs[id]; dup {
		// Lost a race with a concurrent start of the same id.
		_ = p.signal(syscall.SIGKILL)
		return nil, &agentError{proto.KindInvalid, fmt.Sprintf("start: process %s already exists", id)}
	}
	a.procs[id] = p
	a.log.Debug("process started", "id", id, "pid", p.pid, "args", spec.Args, "direct", p.direct, "cinit", !p.direct, "zygote", p.zygote)
	return p, nil
}

// asAgentError is err as the agent answers it: an agentError as it is,
// anything else as an internal error.
func asAgentError(err error) *agentError {
	if ae := (*agentError)(nil); errors.As(err, &ae) {
		return ae
	}
	return &agentError{proto.KindInternal, err.Error()}
}

// childFiles are the descriptors of one spawn; every one is closed on every
// path out of spawn.
type childFiles struct {
	parent []*os.File // ours, closed on failure
	child  []*os.File // the child's copies, closed after fork
}

func (f *childFiles) pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err == nil {
		f.parent = append(f.parent, r, w)
	}
	return r, w, err
}

// release closes the child's copies, and ours too when the spawn failed.
func (f *childFiles) release(failed bool) {
	for _, c := range f.child {
		c.Close()
	}
	if failed {
		for _, p := range f.parent {
			p.Close()
		}
	}
}

// cgroup, when set, is the container's cgroup directory.
func (a *Agent) spawn(id string, cfg initConfig, targetPid int, cgroup string) (_ *process, retErr error) {
	if targetPid == 0 {
		if z := a.takeZygote(id, cfg); z != nil {
			return a.spawnFromZygote(id, z, cfg, cgroup)
		}
	}
	var files childFiles
	defer func() { files.release(retErr != nil) }()
	internal := func(what string, err error) error {
		return &agentError{proto.KindInternal, fmt.Sprintf("start %s: %s: %v", id, what, err)}
	}

	terminal := cfg.Process.Terminal
	direct := targetPid != 0 && canExecDirectly(cfg)
	var stdinR, stdinW, outR, outW, errR, errW *os.File
	var consoleParent, consoleChild *os.File
	var err error
	switch {
	case terminal && direct:
		// execDirectly opens the terminal.
	case terminal:
		// The child replaces its stdio with the terminal it opens.
		null, err := os.Open(os.DevNull)
		if err != nil {
			return nil, internal("open /dev/null", err)
		}
		files.parent = append(files.parent, null)
		stdinR, outW, errW = null, null, null
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, internal("console socket", err)
		}
		consoleParent, consoleChild = os.NewFile(uintptr(fds[0]), "console"), os.NewFile(uintptr(fds[1]), "console")
		files.parent = append(files.parent, consoleParent, consoleChild)
	default:
		if cfg.Process.Stdin {
			if stdinR, stdinW, err = files.pipe(); err != nil {
				return nil, internal("stdin pipe", err)
			}
		} else if stdinR, err = os.Open(os.DevNull); err != nil {
			return nil, internal("open /dev/null", err)
		} else {
			files.parent = append(files.parent, stdinR)
		}
		if outR, outW, err = files.pipe(); err != nil {
			return nil, internal("stdout pipe", err)
		}
		if errR, errW, err = files.pipe(); err != nil {
			return nil, internal("stderr pipe", err)
		}
	}
	stdio := []*os.File{stdinR, outW, errW}
	files.child = append(files.child, stdio...)
	// The C init (cinit_linux.go) starts a main process, and an exec the
	// agent cannot start itself.
	if !direct {
		if a.opts.InitExe == "" {
			return nil, internal("start the init", errors.New("the agent has no container init (Options.InitExe)"))
		}
		if err := nulError(cfg); err != nil {
			return nil, err
		}
	}
	var cprog *cinitProgram
	var barrier, restR *os.File
	// sendRest, for a main process, sends the init the rest of its
	// program once the lookup running beside its start is done, and
	// returns the error that refuses the process, if any.
	var sendRest func() error
	if targetPid == 0 {
		var fds cinitFds
		next := firstExtraFd(stdio, consoleChild)
		if cgroup != "" {
			fds.cgroup, next = next, next+1
		}
		if cfg.Network != nil {
			if barrier, err = networkBarrier(cfg.Network); err != nil {
				return nil, internal("wait for the network", err)
			}
			files.child = append(files.child, barrier)
			fds.barrier, next = next, next+1
		}
		var restW *os.File
		if restR, restW, err = files.pipe(); err != nil {
			return nil, internal("init program pipe", err)
		}
		files.child = append(files.child, restR)
		fds.rest, next = next, next+1
		if cfg.InitBinary != "" {
			fds.initBinary = next
		}
		resolved := resolveInRoot(cfg)
		var limits []checkedRlimit
		var drop []int
		cprog, limits, drop, err = cinitStart(cfg, fds)
		if err != nil {
			return nil, asAgentError(err)
		}
		sendRest = func() error {
			defer restW.Close()
			res := <-resolved
			if res.err != nil {
				return asAgentError(res.err)
			}
			first := len(cprog.buf)
			if err := cprog.cinitRest(cfg, fds, res.prog, limits, drop); err != nil {
				return asAgentError(err)
			}
			// More than a pipe holds (a huge environment) is read by
			// the init as it comes. A write that fails found the init
			// gone: its status report says why.
			_, _ = restW.Write(cprog.buf[first:])
			return nil
		}
	}
	var cgroupFile *os.File
	if cgroup != "" {
		// The C init writes its own pid to cgroup.procs; a direct exec
		// and --init's init start their child in the directory (clone3's
		// CLONE_INTO_CGROUP, cgroupFdEnv).
		if !direct && cfg.InitBinary == "" {
			cgroupFile, err = os.OpenFile(filepath.Join(cgroup, "cgroup.procs"), os.O_WRONLY, 0)
		} else {
			cgroupFile, err = os.Open(cgroup)
		}
		if err != nil {
			return nil, internal("open the container's cgroup", err)
		}
		files.child = append(files.child, cgroupFile)
	}
	var attr *os.ProcAttr
	var failR *os.File
	if cprog != nil {
		if attr, failR, err = files.forInit(cprog.buf, stdio, consoleChild, cgroupFile, barrier, restR); err != nil {
			return nil, internal("start the init", err)
		}
		attr.Sys.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS
	}

	p := &process{
		id:      id,
		stdin:   stdinW,
		stdout:  newOutput(a.opts.OutputLimit),
		stderr:  newOutput(a.opts.OutputLimit),
		exited:  make(chan struct{}),
		release: func() {},
		ownUTS:  targetPid == 0,
		direct:  direct,
	}

	a.pmu.Lock()
	var proc *os.Process
	var master *os.File // a direct exec's terminal
	switch {
	case direct:
		proc, err = inNamespacesOf(targetPid, func() (p *os.Process, err error) {
			p, master, err = execDirectly(cfg, stdio, cgroupFile)
			return p, err
		})
	case targetPid == 0:
		proc, err = os.StartProcess(a.opts.InitExe, []string{cinitArg0}, attr)
	default:
		proc, err = inNamespacesOf(targetPid, func() (p *os.Process, err error) {
			p, cprog, failR, err = startExecInit(&files, cfg, a.opts.InitExe, stdio, consoleChild, cgroupFile)
			return p, err
		})
	}
	if err == nil {
		p.pid = proc.Pid
		p.osProc = proc
		a.byPid[proc.Pid] = p
	}
	a.pmu.Unlock()
	if ae := (*agentError)(nil); errors.As(err, &ae) {
		return nil, ae
	}
	if err != nil {
		return nil, internal("run agent child", err)
	}
	for _, f := range files.child {
		f.Close()
	}
	files.child = nil
	// A process the lookup refuses: the init, given no rest, exits
	// without running anything, and what it reports is not the reason.
	var refused error
	if sendRest != nil {
		refused = sendRest()
	}

	// The init's status pipe is close-on-exec in the child: EOF with no
	// data means the user's program is running. A direct exec has
	// already run it.
	var msg []byte
	if failR != nil {
		msg, err = io.ReadAll(failR)
		failR.Close()
	}
	if refused != nil || err != nil || len(msg) > 0 {
		// The child exits right after reporting; wait so the pid is reaped.
		<-p.exited
		for _, f := range []*os.File{outR, errR, stdinW, consoleParent} {
			if f != nil {
				f.Close()
			}
		}
		switch {
		case refused != nil:
			return nil, refused
		case err != nil:
			return nil, internal("read child status", err)
		}
		return nil, cprog.failure(msg)
	}
	if terminal {
		if master == nil {
			master, err = receiveTerminal(consoleParent)
			consoleParent.Close()
			if err != nil {
				_ = p.signal(syscall.SIGKILL)
				return nil, internal("terminal", err)
			}
		}
		if cfg.Process.Stdin {
			if stdinW, err = dupFile(master); err != nil {
				master.Close()
				_ = p.signal(syscall.SIGKILL)
				return nil, internal("terminal input", err)
			}
			p.stdin = stdinW
		}
		p.tty = master
		go p.stdout.pump(&terminalOutput{f: master, exited: p.exited})
		go p.stderr.pump(noOutput{})
	} else {
		go p.stdout.pump(outR)
		go p.stderr.pump(errR)
	}
	p.release = func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.stdin != nil {
			p.stdin.Close()
			p.stdin = nil
		}
		if p.tty != nil {
			p.tty.Close()
			p.tty = nil
		}
	}
	return p, nil
}

// forInit prepares a child init's descriptors: stdio, its configuration
// (config, written ahead into a pipe), its status pipe, whose read end it
// returns, then console (the console socket, consoleFd) when not nil, and
// the extra ones that are not nil, numbered from firstExtraFd on.
func (f *childFiles) forInit(config []byte, stdio []*os.File, console *os.File, extra ...*os.File) (_ *os.ProcAttr, failR *os.File, _ error) {
	r, w, err := f.pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("config pipe: %w", err)
	}
	failR, failW, err := f.pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("status pipe: %w", err)
	}
	f.child = append(f.child, r, failW)
	childFds := append(append([]*os.File(nil), stdio...), r, failW)
	if console != nil {
		f.child = append(f.child, console)
		childFds = append(childFds, console)
	}
	for _, e := range extra {
		if e != nil {
			childFds = append(childFds, e)
		}
	}
	// The configuration is written before the child runs: a pipe holds
	// 64 KiB, and a bigger one (a huge environment) has the pipe grown
	// first (F_SETPIPE_SZ; the agent, as root, is not held to
	// pipe-max-size).
	if len(config) >= 1<<16 {
		if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, len(config)+1); err != nil {
			return nil, nil, fmt.Errorf("grow config pipe: %w", err)
		}
	}
	if _, err := w.Write(config); err != nil {
		return nil, nil, fmt.Errorf("write config: %w", err)
	}
	w.Close()
	return &os.ProcAttr{Env: []string{}, Files: childFds, Sys: &syscall.SysProcAttr{Setsid: true}}, failR, nil
}

// firstExtraFd is the number childFiles.forInit gives its first extra
// descriptor.
func firstExtraFd(stdio []*os.File, console *os.File) int {
	n := len(stdio) + 2 // the configuration and status pipes
	if console != nil {
		n++
	}
	return n
}

// networkBarrier returns the read end of a pipe on which one byte comes
// once the network setup w has ended well, and which ends without one if
// it failed: the C init reads it right before its exec (cinitFds.barrier).
func networkBarrier(w *netWait) (*os.File, error) {
	r, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go signalNetwork(w, wr)
	return r, nil
}

// signalNetwork writes one byte to wr once the network setup w has ended
// well, and closes wr either way.
func signalNetwork(w *netWait, wr *os.File) {
	defer wr.Close()
	<-w.done
	if w.err == nil {
		_, _ = wr.Write([]byte{1})
	}
}
