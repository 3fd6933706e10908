//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// A zygote is a main process's C init started ahead of its container: an
// image's template (proto.OpMountRoot) starts one on the mounted root, and
// it carries out cinitNamespace's part (its PID, mount and UTS namespaces,
// /proc, /sys and /dev) and waits for the rest of its program. Every
// container restored from the template finds it there, and its start
// sends the rest: the hostname, the /etc binds, the chroot, the user and
// the exec.
//
// Why: under TCG a restored guest translates every code path it runs
// afresh, and from its restore to the exec, a template start spent 55-90
// ms building the init's program, 37-85 ms forking and executing the
// init and 26-44 ms in its mounts, on vCPUs the network setup and the
// program's lookup also want (marks in /dev/kmsg; bench/README.md, The
// zygote). A zygote's restore has most of that done: side by side,
// template starts took 62 ms less.
//
// A container takes the zygote only when what the zygote did is what its
// own init would have done: the same root and /dev/shm size, no volumes,
// binds or tmpfs mounted into the root after the zygote copied its mount
// namespace, and stdio that is not a terminal or an attached stdin (the
// zygote's are /dev/null and two pipes). Any other start kills it and
// starts its own init, as it always did.
type zygote struct {
	// proc is the zygote's process, known to the reaper from its start;
	// a container that takes it gets it with its own id and output.
	proc    *process
	root    string
	shmData string
	// prog is its program so far, ending in cinitContinueFd: the rest
	// is appended to it, so that a failing step's index finds its error.
	prog                              *cinitProgram
	outR, errR, restW, failR, barrier *os.File
	// barrierFd is the zygote's number for barrier's read end.
	barrierFd int
}

// startZygote starts a zygote for containers of root. On error nothing is
// left running, and containers start their own init.
func (a *Agent) startZygote(root string) (err error) {
	cfg := initConfig{Root: root, Mounts: true, LastCap: a.lastCap}
	var files childFiles
	defer func() { files.release(err != nil) }()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("start zygote: %w", err)
	}
	files.parent = append(files.parent, null)
	outR, outW, err := files.pipe()
	if err != nil {
		return fmt.Errorf("start zygote: stdout pipe: %w", err)
	}
	errR, errW, err := files.pipe()
	if err != nil {
		return fmt.Errorf("start zygote: stderr pipe: %w", err)
	}
	stdio := []*os.File{null, outW, errW}
	files.child = append(files.child, stdio...)
	barrierR, barrierW, err := files.pipe()
	if err != nil {
		return fmt.Errorf("start zygote: network barrier: %w", err)
	}
	restR, restW, err := files.pipe()
	if err != nil {
		return fmt.Errorf("start zygote: program pipe: %w", err)
	}
	readyR, readyW, err := files.pipe()
	if err != nil {
		return fmt.Errorf("start zygote: ready pipe: %w", err)
	}
	files.child = append(files.child, barrierR, restR, readyW)
	barrierFd := firstExtraFd(stdio, nil)
	prog := cinitNamespace(cfg)
	// The zygote says when its part is done, so that the template's
	// snapshot, taken right after, holds it done.
	prog.op(cinitWriteFd, errnoError("tell the agent the zygote is ready"), cnum(barrierFd+2), cstr("1"))
	prog.op(cinitContinueFd, errnoError("read the rest of the init's operations"), cnum(barrierFd+1))
	attr, failR, err := files.forInit(prog.buf, stdio, nil, barrierR, restR, readyW)
	if err != nil {
		return fmt.Errorf("start zygote: %w", err)
	}
	attr.Sys.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS
	a.pmu.Lock()
	if a.zygote != nil {
		a.pmu.Unlock()
		return errors.New("start zygote: one is there already")
	}
	proc, err := os.StartProcess(a.opts.InitExe, []string{cinitArg0}, attr)
	if err != nil {
		a.pmu.Unlock()
		return fmt.Errorf("start zygote: %w", err)
	}
	p := &process{exited: make(chan struct{}), release: func() {}, ownUTS: true, pid: proc.Pid, osProc: proc, zygote: true}
	a.byPid[proc.Pid] = p
	a.zygote = &zygote{proc: p, root: root, shmData: shmData(0), prog: prog,
		outR: outR, errR: errR, restW: restW, failR: failR, barrier: barrierW, barrierFd: barrierFd}
	a.pmu.Unlock()
	// Not under pmu: the reaper needs it if the zygote dies.
	files.release(false)
	files.child = nil
	defer readyR.Close()
	// Its steps take milliseconds; one that hangs must not hold up the
	// template's build.
	_ = readyR.SetReadDeadline(time.Now().Add(zygoteReadyTimeout))
	n, rerr := readyR.Read(make([]byte, 1))
	if n == 1 {
		return nil
	}
	if errors.Is(rerr, os.ErrDeadlineExceeded) {
		if zp := a.discardZygote(); zp != nil {
			<-zp.exited
		}
		return fmt.Errorf("start zygote: not ready after %s", zygoteReadyTimeout)
	}
	// It ended: its status says why.
	msg, _ := io.ReadAll(failR)
	if zp := a.discardZygote(); zp != nil {
		<-zp.exited
	}
	if len(msg) > 0 {
		return fmt.Errorf("start zygote: %w", prog.failure(msg))
	}
	return errors.New("start zygote: it ended before its namespace was ready")
}

// zygoteReadyTimeout bounds the wait for a zygote's namespace.
const zygoteReadyTimeout = 10 * time.Second

// takeZygote returns the zygote, as process id, when it is alive and
// does what cfg's init would do. A zygote that does not fit is killed:
// its mount namespace holds the root's mounts.
func (a *Agent) takeZygote(id string, cfg initConfig) *zygote {
	a.pmu.Lock()
	defer a.pmu.Unlock()
	z := a.zygote
	if z == nil {
		return nil
	}
	a.zygote = nil
	select {
	case <-z.proc.exited:
		z.close()
		return nil
	default:
	}
	fits := cfg.Root == z.root && cfg.Mounts && !cfg.Volumes && shmData(cfg.ShmSize) == z.shmData &&
		cfg.InitBinary == "" && !cfg.Process.Terminal && !cfg.Process.Stdin
	if !fits {
		z.kill()
		return nil
	}
	z.proc.id = id
	z.proc.stdout, z.proc.stderr = newOutput(a.opts.OutputLimit), newOutput(a.opts.OutputLimit)
	return z
}

// discardZygote kills the zygote, if there is one, and returns its
// process, which the reaper collects.
func (a *Agent) discardZygote() *process {
	a.pmu.Lock()
	defer a.pmu.Unlock()
	z := a.zygote
	if z == nil {
		return nil
	}
	z.kill()
	a.zygote = nil
	return z.proc
}

// kill ends the zygote; the reaper collects it.
func (z *zygote) kill() {
	_ = z.proc.signal(syscall.SIGKILL)
	z.close()
}

func (z *zygote) close() {
	for _, f := range []*os.File{z.outR, z.errR, z.restW, z.failR, z.barrier} {
		f.Close()
	}
}

// spawnFromZygote starts cfg's program as process id in the zygote z, as
// spawn does in an init of its own: the lookup beside the rest of the
// init's program, the network awaited right before the exec.
func (a *Agent) spawnFromZygote(id string, z *zygote, cfg initConfig, cgroup string) (_ *process, retErr error) {
	p := z.proc
	defer func() {
		if retErr != nil {
			// Given no rest, or a rest that failed, the zygote
			// exits; wait so that it is reaped, then close its pipes.
			z.restW.Close()
			z.barrier.Close()
			<-p.exited
			z.close()
		}
	}()
	resolved := resolveInRoot(cfg)
	limits, drop, err := processLimits(cfg)
	if err != nil {
		return nil, asAgentError(err)
	}
	binds, err := etcBinds(cfg.Root, cfg.EtcDir)
	if err != nil {
		return nil, asAgentError(err)
	}
	if cgroup != "" {
		// Its own init joins the cgroup by writing to cgroup.procs; the
		// zygote is moved there.
		if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(p.pid)), 0); err != nil {
			return nil, &agentError{proto.KindInternal, fmt.Sprintf("start %s: join the container's cgroup: %v", id, err)}
		}
	}
	prog := z.prog
	first := len(prog.buf)
	if err := prog.cinitContainer(cfg, binds, cinitFds{}); err != nil {
		return nil, asAgentError(err)
	}
	barrierFd := 0
	if cfg.Network != nil {
		barrierFd = z.barrierFd
		go signalNetwork(cfg.Network, z.barrier)
	} else {
		z.barrier.Close()
	}
	res := <-resolved
	if res.err != nil {
		return nil, asAgentError(res.err)
	}
	if err := prog.cinitRest(cfg, cinitFds{barrier: barrierFd}, res.prog, limits, drop); err != nil {
		return nil, asAgentError(err)
	}
	// More than a pipe holds (a huge environment) is read by the init as
	// it comes; a write that fails found it gone, and its status says why.
	_, _ = z.restW.Write(prog.buf[first:])
	z.restW.Close()
	msg, err := io.ReadAll(z.failR)
	z.failR.Close()
	if err != nil || len(msg) > 0 {
		if err != nil {
			return nil, &agentError{proto.KindInternal, fmt.Sprintf("start %s: read child status: %v", id, err)}
		}
		return nil, prog.failure(msg)
	}
	go p.stdout.pump(z.outR)
	go p.stderr.pump(z.errR)
	return p, nil
}
