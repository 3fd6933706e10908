//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// namespaceKind is one kind of namespace an exec shares with its container.
type namespaceKind struct {
	name string // under /proc/PID/ns
	flag int    // for setns(2)
}

// execNamespaces are every kind runc joins for an exec (the guest has no
// user namespaces), in the order they are joined. The mount namespace
// comes last because joining it resets the thread's root and working
// directory.
func execNamespaces() []namespaceKind {
	return []namespaceKind{
		{"ipc", unix.CLONE_NEWIPC},
		{"uts", unix.CLONE_NEWUTS},
		{"net", unix.CLONE_NEWNET},
		{"pid", unix.CLONE_NEWPID},
		{"cgroup", unix.CLONE_NEWCGROUP},
		{"mnt", unix.CLONE_NEWNS},
	}
}

// nsToJoin is an open namespace of the target that differs from ours.
type nsToJoin struct {
	kind namespaceKind
	fd   int
}

// openNamespaces opens those namespaces of targetPid that the calling
// thread is not already in. All are opened before any is joined, so that
// every /proc path is resolved in the agent's own mount namespace. A kind
// the kernel lacks (no /proc/PID/ns entry) is skipped.
func openNamespaces(targetPid int) (_ []nsToJoin, retErr error) {
	var open []nsToJoin
	defer func() {
		if retErr != nil {
			closeNamespaces(open)
		}
	}()
	for _, k := range execNamespaces() {
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/%s", targetPid, k.name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			if _, serr := os.Stat(fmt.Sprintf("/proc/%d", targetPid)); serr != nil {
				return nil, fmt.Errorf("open %s namespace of pid %d: %w", k.name, targetPid, err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open %s namespace of pid %d: %w", k.name, targetPid, err)
		}
		var theirs, ours unix.Stat_t
		if err := unix.Fstat(fd, &theirs); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("stat %s namespace of pid %d: %w", k.name, targetPid, err)
		}
		if err := unix.Stat("/proc/thread-self/ns/"+k.name, &ours); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("stat own %s namespace: %w", k.name, err)
		}
		if theirs.Dev == ours.Dev && theirs.Ino == ours.Ino {
			unix.Close(fd)
			continue
		}
		open = append(open, nsToJoin{k, fd})
	}
	return open, nil
}

func closeNamespaces(ns []nsToJoin) {
	for _, n := range ns {
		unix.Close(n.fd)
	}
}

// inNamespacesOf runs start in every namespace of targetPid, where the
// process it starts begins its life.
//
// Namespaces are per thread, so this happens on a locked thread that is
// thrown away afterwards instead of being returned to the Go scheduler
// with foreign namespaces. Joining a mount namespace needs a thread that
// shares no filesystem attributes (setns(2): EINVAL otherwise), hence the
// unshare of CLONE_FS first; start may change the thread's root and
// working directory too, and its credentials and capabilities, which are
// per thread as well.
func inNamespacesOf(targetPid int, start func() (*os.Process, error)) (*os.Process, error) {
	type result struct {
		p   *os.Process
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread ends with this goroutine.
		ns, err := openNamespaces(targetPid)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer closeNamespaces(ns)
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			ch <- result{err: fmt.Errorf("unshare filesystem attributes: %w", err)}
			return
		}
		for _, n := range ns {
			if err := unix.Setns(n.fd, n.kind.flag); err != nil {
				ch <- result{err: fmt.Errorf("join %s namespace of pid %d: %w", n.kind.name, targetPid, err)}
				return
			}
		}
		p, err := start()
		ch <- result{p, err}
	}()
	r := <-ch
	return r.p, r.err
}
