//go:build linux

package agent

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// dockerInitPath is where --init's init appears in the container, as
// dockerd mounts tini there: it is the agent binary itself, bound
// read-only, so a `ps` in the container shows what it shows under dockerd.
const dockerInitPath = "/sbin/docker-init"

// runDockerInit is the agent as --init's PID 1 ("docker-init -- CMD
// ARGS..."), doing what tini does by default: it runs the command as its
// child in a process group of its own (in the foreground of a terminal),
// forwards every signal to it, reaps every orphan that ends up with it,
// and exits as the child did (128+signal when killed). It never returns.
func runDockerInit(args []string) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "docker-init: no command given")
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs)
	path, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "docker-init: exec %s failed: %v\n", args[0], err)
		os.Exit(127)
	}
	attr := &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	// The container's cgroup, when the agent keeps one: the child is born
	// in it (clone3's CLONE_INTO_CGROUP), so no fork of the command's
	// escapes its pids limit, while this init's own threads stay out.
	if v, ok := os.LookupEnv(cgroupFdEnv); ok {
		os.Unsetenv(cgroupFdEnv)
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
			attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, fd
		}
	}
	attr.Env = os.Environ()
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err == nil {
		attr.Sys.Foreground, attr.Sys.Ctty = true, 0
	}
	child, err := os.StartProcess(path, args, attr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "docker-init: exec %s failed: %v\n", args[0], err)
		os.Exit(127)
	}
	for sig := range sigs {
		s, ok := sig.(syscall.Signal)
		if !ok {
			continue
		}
		switch s {
		case syscall.SIGCHLD:
			if code, done := reapAll(child.Pid); done {
				os.Exit(code)
			}
		case syscall.SIGURG:
			// The Go runtime's own preemption signal, not a user's.
		default:
			_ = unix.Kill(child.Pid, s)
		}
	}
}

// reapAll waits for every child that has exited and reports whether the
// main one was among them, with its shell-style exit code.
func reapAll(main int) (code int, done bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return code, done
		}
		if pid != main {
			continue
		}
		done = true
		code = ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	}
}
