// Package vmmproc is the process plumbing that VMM drivers (and the
// virtiofsd supervisor) need to keep a process running apart from the
// daemon and find it again: the pid file, a directory handle for socket
// paths over 108 bytes, pidfd polling, and recognising a process by its
// working directory. The drivers differ only in what they check of the
// command line.
package vmmproc

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/google/renameio/v2"
	"golang.org/x/sys/unix"
)

// ReadPID reads the pid a driver wrote to dir/name.
func ReadPID(dir, name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bad pid file %s", filepath.Join(dir, name))
	}
	return pid, nil
}

// OpenDir opens dir as an O_PATH handle through which its sockets are
// reached by a short /proc/self/fd path.
func OpenDir(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open vm dir %s: %w", dir, err)
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// WriteFileAtomic replaces path with data (temp file, fsync, rename) and
// syncs its directory.
func WriteFileAtomic(path string, data []byte) error {
	if err := renameio.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("sync dir of %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir of %s: %w", path, err)
	}
	return nil
}

// AppendLine appends line to the file at path and syncs it. Drivers and
// their callers record what a VM owns (its TAPs) this way before they hand
// it over, so that a sweep after a crash finds it even if the record is cut
// short at the last line.
func AppendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("record %s: %w", path, err)
	}
	_, err = fmt.Fprintln(f, line)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("record %s: %w", path, err)
	}
	return nil
}

// PidfdAlive reports whether the process behind pidfd has not exited.
func PidfdAlive(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// WaitPidfd blocks until the process behind pidfd exits.
func WaitPidfd(pidfd int) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, -1)
		if err == unix.EINTR || (err == nil && n == 0) {
			continue
		}
		return
	}
}

// FindRecorded finds the VMM whose pid dir/pidFile records and returns a
// pidfd for it. The pidfd is opened before ours checks the process's
// identity, so the check is about the process the pidfd refers to and not
// a later one that reused its pid. what names the VMM in errors; a missing
// record, a gone process or another one wrap errdefs.ErrNotFound.
func FindRecorded(dir, pidFile, what string, ours func(pid int) bool) (pid, pidfd int, err error) {
	pid, err = ReadPID(dir, pidFile)
	if err != nil {
		return 0, -1, fmt.Errorf("reattach %s: %w: %w", dir, err, errdefs.ErrNotFound)
	}
	pidfd, err = unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, -1, fmt.Errorf("reattach %s: %s %d: %w: %w", dir, what, pid, err, errdefs.ErrNotFound)
	}
	if !ours(pid) || !PidfdAlive(pidfd) {
		unix.Close(pidfd)
		return 0, -1, fmt.Errorf("reattach %s: process %d is not its %s: %w", dir, pid, what, errdefs.ErrNotFound)
	}
	return pid, pidfd, nil
}

// Kill sends SIGKILL through signal unless done is already closed, then
// waits for done: the driver closes it once the process has exited. what
// and pid name the VMM in errors.
func Kill(what string, pid int, done <-chan struct{}, signal func(syscall.Signal) error) error {
	select {
	case <-done:
		return nil
	default:
	}
	err := signal(syscall.SIGKILL)
	if err != nil && !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s %d: %w", what, pid, err)
	}
	<-done
	return nil
}

// WaitDone returns nil once done is closed (the process exited, whatever
// its status), or ctx's error first.
func WaitDone(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CmdlineIn returns the NUL-separated command line of pid if its working
// directory is dir (a VMM runs in its VM's directory); ok is false
// otherwise, or when pid is gone.
func CmdlineIn(pid int, dir string) (cmdline []byte, ok bool) {
	proc := "/proc/" + strconv.Itoa(pid)
	cwd, err := os.Readlink(proc + "/cwd")
	if err != nil {
		return nil, false
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if cwd != dir {
		return nil, false
	}
	cmdline, err = os.ReadFile(proc + "/cmdline")
	if err != nil {
		return nil, false
	}
	return cmdline, true
}

// OutputTail returns the end of a VMM's own output log, where it explains
// why it refused to start.
func OutputTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "no output: " + err.Error()
	}
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return "no output"
	}
	return string(b)
}

// Threads describes each of pid's threads as "tid name state wchan",
// with the system call it is in when the caller may read that ("syscall 7"):
// enough to see which thread of a VMM that stopped answering is blocked,
// and in what. Threads that end while they are read are left out.
func Threads(pid int) ([]string, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("threads of %d: %w", pid, err)
	}
	// The main thread (ID pid) first and the rest by ID, not in
	// ReadDir's order of names, which puts "10000" before "9999".
	var tids []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	slices.SortFunc(tids, func(a, b int) int {
		switch {
		case a == pid:
			return -1
		case b == pid:
			return 1
		}
		return cmp.Compare(a, b)
	})
	var out []string
	for _, tid := range tids {
		td := filepath.Join(dir, strconv.Itoa(tid))
		stat, err := os.ReadFile(filepath.Join(td, "stat"))
		if err != nil {
			continue
		}
		name, state, ok := statNameState(string(stat))
		if !ok {
			continue
		}
		line := strconv.Itoa(tid) + " " + name + " " + state
		if w, err := os.ReadFile(filepath.Join(td, "wchan")); err == nil && len(w) > 0 && string(w) != "0" {
			line += " " + string(w)
		}
		if sc, err := os.ReadFile(filepath.Join(td, "syscall")); err == nil {
			if f := strings.Fields(string(sc)); len(f) > 0 && f[0] != "running" && f[0] != "-1" {
				line += " syscall " + f[0]
			}
		}
		out = append(out, line)
	}
	return out, nil
}

// Children lists pid's child processes (/proc's children files, one per
// thread): Debian's virtiofsd, for one, serves from a child it forks into
// its sandbox while the parent waits.
func Children(pid int) ([]int, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("children of %d: no such process", pid)
	}
	var kids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(b)) {
			if kid, err := strconv.Atoi(field); err == nil {
				kids = append(kids, kid)
			}
		}
	}
	return kids, nil
}

// statNameState takes the name and state out of a /proc stat line. The
// name is in parentheses and may itself hold spaces and parentheses, so
// it runs to the last ")".
func statNameState(stat string) (name, state string, ok bool) {
	open := strings.IndexByte(stat, '(')
	end := strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", "", false
	}
	rest := strings.Fields(stat[end+1:])
	if len(rest) == 0 {
		return "", "", false
	}
	return stat[open+1 : end], rest[0], true
}
