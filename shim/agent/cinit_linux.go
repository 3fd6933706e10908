//go:build linux

package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// The C init (cinit/src/init.c, Options.InitExe) starts a container's main
// process, and the execs the agent cannot start itself (startExecInit).
// It replaced the agent's own binary, re-executed as a Go init.
//
// Why: the main process has to be PID 1 of a new PID namespace with that
// namespace's /proc mounted, and only a process inside the namespace can
// mount it, so some program must run between the fork and the user's
// program; Go cannot run code there. Under TCG a VM restored from a
// template starts with an empty translation cache, and the agent binary's
// Go runtime and package initialisers then ran afresh in every init: on
// the project's 2-core host, 81-154 ms from the exec to the init's main,
// then 14-23 ms decoding its JSON configuration and ~30 ms for Go's
// all-threads setgroups, setgid and setuid. A static musl program reached
// main ~26 ms after its exec there, a minimal Go program 72-97 ms.
//
// The C program holds no policy: the agent works everything out here,
// in Go — the user, environment and program path (on a thread chrooted
// into the container's root, as the Go init did after its chroot), the
// mounts, devices and /etc binds (rootMounts, devNodes, devLinks,
// etcBinds), the limits and capabilities — and hands the init a list of
// operations to carry out. When one fails, the init reports its index and
// errno, and the agent words the error as the Go init did.
//
// An image's template starts the init ahead of its containers, with its
// namespaces and mounts done (a zygote, zygote_linux.go). An earlier try,
// a Go init started before a template's snapshot but doing all of its
// work after OpStart, gained nothing (84-125 ms from the end of the setup
// to the exec against 96-104 ms, `docker run --rm` 548 ms against 546):
// what a restored guest pays for is running the init's code, mounts
// included, not having a process to run it in.

// cinitArg0 is the C init's argv[0]; under cinitWarmArg0 it exits 0 at
// once, which makes it the program of the template's warm-up (OpWarm).
const (
	cinitArg0     = "husk-init"
	cinitWarmArg0 = "husk-init-warm"
)

// dockerInitPath is where --init's init appears in the container, as
// dockerd mounts tini there: the C init's own binary, bound read-only,
// which runs as tini does by default under that name (cinit/src/init.c), so a
// `ps` in the container shows what it shows under dockerd.
const dockerInitPath = "/sbin/docker-init"

// Operation codes; keep in step with cinit/src/init.c.
const (
	cinitMkdirAll byte = iota + 1
	cinitMount
	cinitMknod
	cinitSymlink
	cinitRemove
	cinitLchown
	cinitSethostname
	cinitCreate
	cinitChroot
	cinitChdir
	cinitSetrlimit
	cinitCapbsetDrop
	cinitSetgroups
	cinitSetgid
	cinitSetuid
	cinitWriteFd
	cinitExec
	cinitOpenTerminal
	cinitTerminalSize
	cinitTerminalChown
	cinitSendTerminal
	cinitDupTerminal
	cinitSetCtty
	cinitOpen
	cinitCloseOnExec
	cinitAwaitFd
	cinitContinueFd
	cinitNoNewPrivs
	cinitSetdomainname
	cinitOomScoreAdj
	cinitMaskPath
	cinitReadonlyPath
)

// cinitProgram is the C init's encoded operations, and for each the error
// that its failure with an errno stands for.
type cinitProgram struct {
	buf  []byte
	errs []func(unix.Errno) error
}

// cinitArg is one encoded argument of an operation.
type cinitArg func(*cinitProgram)

// cstr, cnum, cstrs and cnums encode a string, a number, a string list and
// a number list, as cinit/src/init.c reads them: numbers are 8 bytes, little
// endian; a string is its length, its bytes and a NUL; a list is its
// length and its items.
func cstr(s string) cinitArg {
	return func(p *cinitProgram) {
		p.buf = binary.LittleEndian.AppendUint64(p.buf, uint64(len(s)))
		p.buf = append(append(p.buf, s...), 0)
	}
}

func cnum[N ~int | ~uint32 | ~uint64 | ~uintptr](n N) cinitArg {
	return func(p *cinitProgram) { p.buf = binary.LittleEndian.AppendUint64(p.buf, uint64(n)) }
}

func cstrs(list []string) cinitArg {
	return func(p *cinitProgram) {
		cnum(len(list))(p)
		for _, s := range list {
			cstr(s)(p)
		}
	}
}

func cnums(list []int) cinitArg {
	return func(p *cinitProgram) {
		cnum(len(list))(p)
		for _, n := range list {
			cnum(n)(p)
		}
	}
}

// op appends an operation, and the error its failure stands for.
func (p *cinitProgram) op(code byte, onErr func(unix.Errno) error, args ...cinitArg) {
	p.buf = append(p.buf, code)
	for _, a := range args {
		a(p)
	}
	p.errs = append(p.errs, onErr)
}

// failure is the error the C init's status report ("<index> <errno>")
// stands for.
func (p *cinitProgram) failure(report []byte) *agentError {
	var index uint64
	var errno int
	if _, err := fmt.Sscanf(string(report), "%d %d", &index, &errno); err != nil || index >= uint64(len(p.errs)) {
		return &agentError{proto.KindInternal, fmt.Sprintf("container init failed: %q", report)}
	}
	return asAgentError(p.errs[index](unix.Errno(errno)))
}

// nulError refuses a process the C init would start with a NUL byte in
// a string the kernel takes as a C string, as execve would (the C init's
// operations carry C strings).
func nulError(cfg initConfig) error {
	spec := cfg.Process
	for _, list := range [][]string{spec.Args, spec.Env, spec.GroupAdd, {cfg.Root, cfg.Hostname, cfg.Domainname, spec.Cwd, spec.User}} {
		for _, s := range list {
			if strings.ContainsRune(s, 0) {
				return execError(spec.Args[0], unix.EINVAL)
			}
		}
	}
	return nil
}

// programInRoot is who runs a main process and how, as the init would work
// it out after its chroot.
type programInRoot struct {
	user execUser
	env  []string
	cwd  string
	// path is the program's file; pathErr is why it has none.
	path    string
	pathErr error
	// cwdErr is why the user cannot enter the working directory; the
	// program is then not looked up, as the init fails first.
	cwdErr error
}

// resolveInRoot works out programInRoot for cfg on a thread of its own
// chrooted into the container's root. A missing working directory is
// created there, owned by root, as Docker does for a main process; the
// program is looked up as the user, from that directory.
//
// The thread then gives back the agent's root, working directory and
// credentials and returns to the scheduler: throwing it away, as a thread
// that joined a container's namespaces must be, cost a template start
// ~20-30 ms of guest time under TCG (thread teardown and creation, beside
// the rest of the start). Its filesystem attributes stay unshared from
// the agent's other threads but equal to theirs, which holds as long as
// the agent never changes its root, working directory or umask. A thread
// that cannot be restored is thrown away.
//
// The answer comes on the returned channel, so that the caller can start
// the init meanwhile (cinitStart).
func resolveInRoot(cfg initConfig) <-chan resolution {
	ch := make(chan resolution, 1)
	go func() {
		runtime.LockOSThread()
		r, restore, err := resolveOnThread(cfg)
		ch <- resolution{r, err}
		if restore() == nil {
			runtime.UnlockOSThread()
		}
	}()
	return ch
}

// resolution is resolveInRoot's answer.
type resolution struct {
	prog programInRoot
	err  error
}

// resolveOnThread is resolveInRoot's work on the locked thread; restore
// gives the thread back the agent's root and working directory, and fails
// if it cannot or the thread's credentials were not restored.
func resolveOnThread(cfg initConfig) (_ programInRoot, restore func() error, _ error) {
	broken := func() error { return errors.New("thread not restored") }
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return programInRoot{}, broken, fmt.Errorf("unshare filesystem attributes: %w", err)
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return programInRoot{}, broken, fmt.Errorf("open the agent's root: %w", err)
	}
	cwd, err := unix.Open(".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(root)
		return programInRoot{}, broken, fmt.Errorf("open the agent's working directory: %w", err)
	}
	var credsErr error
	restore = func() error {
		defer unix.Close(root)
		defer unix.Close(cwd)
		if credsErr != nil {
			return credsErr
		}
		if err := unix.Fchdir(root); err != nil {
			return err
		}
		if err := unix.Chroot("."); err != nil {
			return err
		}
		return unix.Fchdir(cwd)
	}
	var r programInRoot
	u, env, dir, err := enterRoot(cfg)
	if err != nil {
		return r, restore, err
	}
	r.user, r.env, r.cwd = u, env, dir
	// Created here, in the root the agent sees (as dockerd creates it in
	// the container's filesystem before its mounts); the init's program
	// creates it again after its own mounts, where one of them covers it.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		if st, serr := os.Stat(dir); serr == nil && !st.IsDir() {
			// dockerd's words (SetupWorkingDirectory) for a working
			// directory that is a file.
			return r, restore, &agentError{proto.KindConfig, fmt.Sprintf("Cannot mkdir: %s is not a directory", dir)}
		}
		return r, restore, fmt.Errorf("create working directory %s: %w", dir, err)
	}
	credsErr = withFileCredentials(u, func() error {
		if err := unix.Chdir(dir); err != nil {
			r.cwdErr = err
			return nil
		}
		r.path, r.pathErr = lookPath(cfg.Process.Args[0], envValue(env, "PATH"))
		return nil
	})
	return r, restore, credsErr
}

// cinitFds are the numbers of the descriptors the C init gets beyond its
// stdio, configuration, status and console; 0 is none.
type cinitFds struct {
	// cgroup is the container's cgroup: its cgroup.procs, which the init
	// joins right before its exec, or under --init the directory, which
	// --init's init starts its child in (cgroupFdEnv).
	cgroup int
	// initBinary is a free number at which the init opens --init's init
	// before its chroot, to bind it at dockerInitPath after: a bind's
	// source must be in the init's own mount namespace, which a file the
	// agent opened is not.
	initBinary int
	// barrier, when not 0, is a pipe the init reads a byte from right
	// before its exec: the network setup still under way
	// (networkBarrier).
	barrier int
	// rest is the pipe on which the init reads the rest of its
	// operations (cinitStart).
	rest int
}

// cinitStart is the first part of the C init's program for cfg: the steps
// of runc's init (cinitNamespace's, then cinitContainer's) up to those that
// need the program's lookup (resolveInRoot), and then an operation that
// reads the rest from fds.rest (cinitRest). The init starts and carries
// out this part while the agent looks the program up beside it: under
// TCG, after a template's restore, the lookup and the init's start and
// mounts are each tens of milliseconds of first-time guest code, and one
// no longer waits for the other.
func cinitStart(cfg initConfig, fds cinitFds) (_ *cinitProgram, limits []checkedRlimit, drop []int, _ error) {
	limits, drop, err := processLimits(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	binds, err := etcBinds(cfg.Root, cfg.EtcDir)
	if err != nil {
		return nil, nil, nil, err
	}
	p := cinitNamespace(cfg)
	if err := p.cinitContainer(cfg, binds, fds); err != nil {
		return nil, nil, nil, err
	}
	p.op(cinitContinueFd, errnoError("read the rest of the init's operations"), cnum(fds.rest))
	return p, limits, drop, nil
}

// cinitNamespace is the part of a main process's init that is the same
// for every container of a root: its mounts made private, and /proc,
// /sys and /dev as runc sets them up. A zygote (zygote_linux.go) runs it
// before its container exists.
func cinitNamespace(cfg initConfig) *cinitProgram {
	p := &cinitProgram{}
	wrap, pathErr := errnoError, errnoPathError
	p.op(cinitMount, wrap("make mounts private"), cstr(""), cstr("/"), cstr(""), cnum(uintptr(unix.MS_REC|unix.MS_PRIVATE)), cstr(""))
	for _, m := range rootMounts(cfg) {
		target := filepath.Join(cfg.Root, m.Target)
		p.op(cinitMkdirAll, pathErr("create mount point %s", "mkdir", target, target), cstr(target), cnum(0o755))
		// A read-only mount is made read-write, then made read-only on its
		// own: sysfs and cgroup2 share one superblock across the guest's
		// mounts, and a read-only first mount would make it read-only for
		// all, the agent's among them (GuestCgroups).
		p.op(cinitMount, wrap("mount %s on %s", m.FSType, target), cstr(m.Source), cstr(target), cstr(m.FSType), cnum(m.Flags&^unix.MS_RDONLY), cstr(m.Data))
		if m.Flags&unix.MS_RDONLY != 0 {
			p.op(cinitMount, wrap("remount %s read-only", target), cstr(""), cstr(target), cstr(""), cnum(m.Flags|unix.MS_REMOUNT|unix.MS_BIND), cstr(""))
		}
	}
	dev := filepath.Join(cfg.Root, "dev")
	for _, n := range devNodes() {
		path := filepath.Join(dev, n.Name)
		p.op(cinitMknod, wrap("create %s", path), cstr(path), cnum(unix.S_IFCHR|0o666), cnum(unix.Mkdev(n.Major, n.Minor)))
	}
	for _, l := range devLinks() {
		link := filepath.Join(dev, l[1])
		p.op(cinitSymlink, pathErr("create /dev/%s", "symlink", link, l[1]), cstr(l[0]), cstr(link))
	}
	return p
}

// cinitContainer appends, before the init's chroot, what is the
// container's own: its hostname, its --device nodes, the /etc binds and
// --init's binary.
func (p *cinitProgram) cinitContainer(cfg initConfig, binds []etcBind, fds cinitFds) error {
	wrap, pathErr := errnoError, errnoPathError
	if cfg.Hostname != "" {
		p.op(cinitSethostname, wrap("set hostname"), cstr(cfg.Hostname))
	}
	if cfg.Domainname != "" {
		p.op(cinitSetdomainname, wrap("set domainname"), cstr(cfg.Domainname))
	}
	if cfg.Privileged {
		// Read-write, as runc mounts them for a privileged container;
		// cinitNamespace, which a zygote runs before it knows the
		// container, made them read-only.
		for _, m := range rootMounts(cfg) {
			if m.FSType == "sysfs" || m.FSType == "cgroup2" {
				target := filepath.Join(cfg.Root, m.Target)
				p.op(cinitMount, wrap("remount %s read-write", target), cstr(""), cstr(target), cstr(""), cnum(m.Flags&^unix.MS_RDONLY|unix.MS_REMOUNT|unix.MS_BIND), cstr(""))
			}
		}
	}
	dev := filepath.Join(cfg.Root, "dev")
	for _, d := range cfg.Devices {
		path, err := deviceNodePath(dev, d)
		if err != nil {
			return err
		}
		p.op(cinitMkdirAll, pathErr("create device %s", "mkdir", filepath.Dir(path), d.Path), cstr(filepath.Dir(path)), cnum(0o755))
		p.op(cinitRemove, pathErr("create device %s", "remove", path, d.Path), cstr(path))
		kind := uint32(unix.S_IFCHR)
		if d.Block {
			kind = unix.S_IFBLK
		}
		p.op(cinitMknod, wrap("create device %s", d.Path), cstr(path), cnum(uintptr(kind|d.Mode&0o7777)), cnum(unix.Mkdev(d.Major, d.Minor)))
		p.op(cinitLchown, pathErr("create device %s", "lchown", path, d.Path), cstr(path), cnum(d.UID), cnum(d.GID))
	}
	for _, b := range binds {
		if b.Create {
			p.op(cinitCreate, pathErr("create mount point %s", "open", b.Dst, b.Dst), cstr(b.Dst), cnum(0o644))
		}
		p.op(cinitMount, wrap("bind %s on %s", b.Src, b.Dst), cstr(b.Src), cstr(b.Dst), cstr(""), cnum(uintptr(unix.MS_BIND)), cstr(""))
		if cfg.ReadOnly {
			p.remountRO(b.Dst)
		}
	}
	// After the binds, as runc does them after its mounts.
	for _, path := range cfg.ReadonlyPaths {
		target := filepath.Join(cfg.Root, filepath.Clean("/"+path))
		p.op(cinitReadonlyPath, wrap("make %s read-only", path), cstr(target))
	}
	null := filepath.Join(dev, "null")
	for _, path := range cfg.MaskedPaths {
		target := filepath.Join(cfg.Root, filepath.Clean("/"+path))
		p.op(cinitMaskPath, wrap("mask %s", path), cstr(null), cstr(target))
	}
	if cfg.InitBinary != "" {
		p.op(cinitOpen, pathErr("open init binary", "open", cfg.InitBinary), cstr(cfg.InitBinary), cnum(fds.initBinary))
	}
	return nil
}

// cinitRest appends to p, after cinitStart's part, the steps that need
// the program's lookup res: the chroot, the working directory Docker
// creates for a main process, and the process's own steps up to its exec.
// It returns the error that refuses the process, if res holds one.
func (p *cinitProgram) cinitRest(cfg initConfig, fds cinitFds, res programInRoot, limits []checkedRlimit, drop []int) error {
	spec := cfg.Process
	path, args, env := res.path, spec.Args, res.env
	switch {
	case res.cwdErr != nil:
		return cwdError(res.cwd, res.cwdErr)
	case cfg.Exe != "":
		path = cfg.Exe
	case res.pathErr != nil:
		return res.pathErr
	}
	if cfg.InitBinary != "" {
		// The init finds the program again through PATH, as tini does.
		path, args = dockerInitPath, append([]string{dockerInitPath, "--"}, args...)
		if fds.cgroup > 0 {
			env = append(slices.Clip(env), cgroupFdEnv+"="+strconv.Itoa(fds.cgroup))
		}
	}
	wrap, pathErr := errnoError, errnoPathError
	// enterRoot, and the working directory Docker creates for a main
	// process
	p.op(cinitChroot, wrap("chroot %s", cfg.Root), cstr(cfg.Root))
	p.op(cinitChdir, wrap("chdir /"), cstr("/"))
	// After the chroot, so that the targets resolve inside the root.
	for _, m := range spec.Tmpfs {
		target := filepath.Clean("/" + m.Target)
		p.op(cinitMkdirAll, pathErr("create mount point %s", "mkdir", target, target), cstr(target), cnum(0o755))
		p.op(cinitMount, wrap("mount tmpfs on %s", target), cstr("tmpfs"), cstr(target), cstr("tmpfs"),
			cnum(uintptr(unix.MS_NOSUID|unix.MS_NODEV)), cstr(tmpfsData(m)))
	}
	for _, b := range spec.Binds {
		src, target := filepath.Clean("/"+b.Source), filepath.Clean("/"+b.Target)
		if b.Dir {
			p.op(cinitMkdirAll, pathErr("create mount point %s", "mkdir", target, target), cstr(target), cnum(0o755))
		} else {
			dir := filepath.Dir(target)
			p.op(cinitMkdirAll, pathErr("create mount point %s", "mkdir", dir, target), cstr(dir), cnum(0o755))
			p.op(cinitCreate, pathErr("create mount point %s", "open", target, target), cstr(target), cnum(0o644))
		}
		p.op(cinitMount, wrap("bind %s on %s", src, target), cstr(src), cstr(target), cstr(""), cnum(uintptr(unix.MS_BIND|unix.MS_REC)), cstr(""))
		if b.ReadOnly {
			p.remountRO(target)
		}
	}
	p.op(cinitMkdirAll, pathErr("create working directory %s", "mkdir", res.cwd, res.cwd), cstr(res.cwd), cnum(0o755))
	if cfg.InitBinary != "" {
		// Bound after the chroot, so that the image's /sbin (a
		// symbolic link in many images) resolves inside the root.
		src, dir := fmt.Sprintf("/proc/self/fd/%d", fds.initBinary), filepath.Dir(dockerInitPath)
		p.op(cinitMkdirAll, pathErr("create %s", "mkdir", dir, dir), cstr(dir), cnum(0o755))
		p.op(cinitCreate, pathErr("create mount point %s", "open", dockerInitPath, dockerInitPath), cstr(dockerInitPath), cnum(0o755))
		p.op(cinitMount, wrap("bind %s on %s", src, dockerInitPath), cstr(src), cstr(dockerInitPath), cstr(""), cnum(uintptr(unix.MS_BIND)), cstr(""))
		p.remountRO(dockerInitPath)
	}
	if cfg.ReadOnly {
		p.remountRO("/")
	}
	procsFd := fds.cgroup
	if cfg.InitBinary != "" {
		procsFd = 0 // --init's init starts its child in the cgroup
	}
	p.oomScoreAdj(cfg.OomScoreAdj)
	p.processOps(spec, limits, drop, res.user, res.cwd, procsFd, fds.barrier, path, args, env)
	return nil
}

// tmpfsData is the mount data of a process's tmpfs.
func tmpfsData(m proto.ProcessTmpfs) string {
	data := fmt.Sprintf("mode=%o,uid=%d,gid=%d", m.Mode&0o7777, m.UID, m.GID)
	if m.Size > 0 {
		data += ",size=" + strconv.FormatInt(m.Size, 10)
	}
	return data
}

// oomScoreAdj appends the write of the process's oom_score_adj
// (--oom-score-adj), which its children inherit, before its setuid: a
// lower value than the init's needs root's CAP_SYS_RESOURCE.
func (p *cinitProgram) oomScoreAdj(adj int) {
	if adj != 0 {
		p.op(cinitOomScoreAdj, errnoError("set oom_score_adj %d", adj), cstr(strconv.Itoa(adj)))
	}
}

// remountRO makes the bind mount at path read-only.
func (p *cinitProgram) remountRO(path string) {
	p.op(cinitMount, errnoError("remount %s read-only", path), cstr(""), cstr(path), cstr(""), cnum(uintptr(unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY)), cstr(""))
}

// errnoError and errnoPathError word an operation's errno as the Go
// functions the inits used do: fmt.Errorf(format+": %w", args..., errno),
// with the errno in an fs.PathError for the second.
func errnoError(format string, args ...any) func(unix.Errno) error {
	return func(e unix.Errno) error { return fmt.Errorf(format+": %w", append(args, e)...) }
}

func errnoPathError(format, op, path string, args ...any) func(unix.Errno) error {
	return func(e unix.Errno) error {
		return fmt.Errorf(format+": %w", append(args, &fs.PathError{Op: op, Path: path, Err: e})...)
	}
}

// checkedRlimit is one of a process's resource limits, checked.
type checkedRlimit struct {
	resource int
	value    unix.Rlimit
}

// processLimits checks the limits and the capabilities of cfg's process
// before anything is started, as an init refused them first.
func processLimits(cfg initConfig) ([]checkedRlimit, []int, error) {
	spec := cfg.Process
	limits := make([]checkedRlimit, len(spec.Rlimits))
	for i, l := range spec.Rlimits {
		var err error
		if limits[i].resource, limits[i].value, err = rlimitOf(l); err != nil {
			return nil, nil, err
		}
	}
	drop, err := capabilitiesToDrop(spec.Capabilities, cfg.LastCap)
	if err != nil {
		return nil, nil, err
	}
	return limits, drop, nil
}

// processOps appends what every process's init does once it is in the
// process's root: the limits, the bounding set, the terminal, the
// credentials, the working directory, the cgroup (its cgroup.procs at
// procsFd, when not 0), the wait for the network (a byte on barrierFd,
// when not 0) and the exec.
func (p *cinitProgram) processOps(spec proto.ProcessSpec, limits []checkedRlimit, drop []int, u execUser, cwd string, procsFd, barrierFd int, path string, args, env []string) {
	wrap, pathErr := errnoError, errnoPathError
	for i, l := range limits {
		p.op(cinitSetrlimit, func(e unix.Errno) error { return setrlimitError(spec.Rlimits[i], e) },
			cnum(l.resource), cnum(l.value.Cur), cnum(l.value.Max))
	}
	for _, c := range drop {
		p.op(cinitCapbsetDrop, wrap("drop capability %d from the bounding set", c), cnum(c))
	}
	if spec.NoNewPrivileges {
		p.op(cinitNoNewPrivs, wrap("set no_new_privs"))
	}
	if spec.Terminal {
		// A terminal in the container's own devpts instance (so that
		// tty names a device that exists there, as under runc) becomes
		// the stdio and controlling terminal; its master side goes to
		// the agent over consoleFd.
		p.op(cinitOpenTerminal, pathErr("open a terminal in the container's /dev/pts", "open", "/dev/ptmx"))
		if size := spec.ConsoleSize; size != nil && size.Rows > 0 && size.Cols > 0 {
			p.op(cinitTerminalSize, wrap("set terminal size"), cnum(uint64(size.Rows)), cnum(uint64(size.Cols)))
		}
		p.op(cinitTerminalChown, wrap("chown terminal"), cnum(u.UID))
		p.op(cinitSendTerminal, wrap("send terminal to the agent"), cnum(consoleFd))
		for fd := 0; fd <= 2; fd++ {
			p.op(cinitDupTerminal, wrap("make the terminal fd %d", fd), cnum(fd))
		}
		p.op(cinitSetCtty, wrap("make the terminal controlling"))
	}
	p.op(cinitSetgroups, wrap("setgroups %v", u.Groups), cnums(u.Groups))
	p.op(cinitSetgid, wrap("setgid %d", u.GID), cnum(u.GID))
	p.op(cinitSetuid, wrap("setuid %d", u.UID), cnum(u.UID))
	p.op(cinitChdir, func(e unix.Errno) error { return cwdError(cwd, e) }, cstr(cwd))
	if procsFd > 0 {
		p.op(cinitWriteFd, wrap("join the container's cgroup"), cnum(procsFd), cstr("0"))
	}
	if barrierFd > 0 {
		p.op(cinitAwaitFd, func(unix.Errno) error { return errors.New("the container's network was not set up") }, cnum(barrierFd))
	}
	p.op(cinitExec, func(e unix.Errno) error { return execError(path, e) }, cstr(path), cstrs(args), cstrs(env))
}

// startExecInit starts an exec that has resource limits through the C
// init: limits are per process, so they must be set in the exec's own
// process before its exec, which Go cannot run code in (execDirectly
// starts every other exec). Like execDirectly it runs on a locked thread
// inside the container's namespaces (inNamespacesOf) and works out the
// user, environment, working directory and program there, chrooted into
// the container's root; the init inherits that root and carries out the
// rest. initExe is opened before the chroot and run through /proc/self/fd.
// procs, when not nil, is the container's cgroup.procs. The returned
// status pipe and program say how the init failed, if it did.
func startExecInit(files *childFiles, cfg initConfig, initExe string, stdio []*os.File, console, procs *os.File) (_ *os.Process, _ *cinitProgram, failR *os.File, _ error) {
	exe, err := os.Open(initExe)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open the container init: %w", err)
	}
	files.child = append(files.child, exe)
	spec := cfg.Process
	u, env, cwd, err := enterRoot(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	limits, drop, err := processLimits(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	path, err := enterAsUser(u, cwd, spec.Args[0], env)
	if err != nil {
		return nil, nil, nil, err
	}
	procsFd, exeFd := 0, firstExtraFd(stdio, console)
	if procs != nil {
		procsFd, exeFd = exeFd, exeFd+1
	}
	p := &cinitProgram{}
	// The program must not inherit the init's binary.
	p.op(cinitCloseOnExec, errnoError("close the container init on exec"), cnum(exeFd))
	p.oomScoreAdj(cfg.OomScoreAdj)
	p.processOps(spec, limits, drop, u, cwd, procsFd, 0, path, spec.Args, env)
	attr, failR, err := files.forInit(p.buf, stdio, console, procs, exe)
	if err != nil {
		return nil, nil, nil, err
	}
	proc, err := os.StartProcess(fmt.Sprintf("/proc/self/fd/%d", exeFd), []string{cinitArg0}, attr)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start the container init: %w", err)
	}
	return proc, p, failR, nil
}
