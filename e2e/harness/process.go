package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a long-running child whose output goes to a log file.
type process struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error // valid once done is closed
}

// startProcess starts cmd with stdout and stderr appended to logPath. The
// child gets SIGTERM if this process dies first, so a crashed test run does
// not leave daemons behind.
func startProcess(cmd *exec.Cmd, logPath string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", logPath, err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits for the process to exit; if ctx ends first
// it sends SIGKILL and reports that the process did not stop cleanly.
func (p *process) stop(ctx context.Context) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.cmd.Path, err)
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s (pid %d) ignored SIGTERM and was killed", p.cmd.Args, p.cmd.Process.Pid)
	}
}

// kill ends the process with SIGKILL, as a crash would, and reaps it.
func (p *process) kill() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.cmd.Path, err)
	}
	<-p.done
	return nil
}

// Proc is a running process found on the host.
type Proc struct {
	PID     int
	Cmdline string
}

// ProcessesMentioning lists the processes, other than this one, whose
// command line contains s; the harness uses it to find what a daemon left
// running under its state directory.
func ProcessesMentioning(s string) ([]Proc, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var found []Proc
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue // the process ended while we looked
		}
		cmdline := strings.TrimSpace(strings.ReplaceAll(string(raw), "\x00", " "))
		if strings.Contains(cmdline, s) {
			found = append(found, Proc{PID: pid, Cmdline: cmdline})
		}
	}
	return found, nil
}

// waitFor calls ready until it returns nil, the process exits, or ctx ends.
func waitFor(ctx context.Context, p *process, what string, ready func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v); last probe: %w", what, p.err, err)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last probe: %v)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}
