//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// Descriptors the agent passes its archive helper beyond stdio.
const (
	configFd = 3
	statusFd = 4
)

// defaultPath is the PATH Docker gives containers whose image sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Reexec must run first in main (and TestMain) of any binary that runs an
// Agent. In the agent's re-executed archive helper (archive_linux.go) it
// does the helper's work and never returns; elsewhere it returns at once.
// Processes in the container are started by the C init (cinit_linux.go)
// or, for most execs, by the agent itself (execdirect_linux.go).
func Reexec() {
	if len(os.Args) > 0 && os.Args[0] == archiveArg0 {
		runArchiveHelper()
	}
}

// enterRoot chroots the caller (the init, or the thread of a direct exec)
// into the container's root and works out who the process runs as, its
// environment and its working directory.
func enterRoot(cfg initConfig) (_ execUser, env []string, cwd string, _ error) {
	if err := unix.Chroot(cfg.Root); err != nil {
		return execUser{}, nil, "", fmt.Errorf("chroot %s: %w", cfg.Root, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return execUser{}, nil, "", fmt.Errorf("chdir /: %w", err)
	}
	spec := cfg.Process
	u, err := lookupUser(spec.User, spec.GroupAdd)
	if err != nil {
		return execUser{}, nil, "", err
	}
	cwd = spec.Cwd
	if cwd == "" {
		cwd = "/"
	}
	return u, containerEnv(spec.Env, u.Home, cfg.Hostname), cwd, nil
}

// cwdError is the failure to enter the working directory cwd, in runc's
// words.
func cwdError(cwd string, err error) error {
	kind := proto.KindInternal
	if errors.Is(err, fs.ErrPermission) {
		kind = proto.KindPermission
	}
	return &agentError{kind, fmt.Sprintf("chdir to cwd (%q) set in config.json failed: %v", cwd, err)}
}

// execError is execve's failure to run the program at path.
func execError(path string, err error) error {
	kind := proto.KindInternal
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		kind = proto.KindPermission
	case errors.Is(err, unix.ENOENT):
		kind = proto.KindNotFound
	}
	return &agentError{kind, fmt.Sprintf("exec %s: %v", path, err)}
}

// lookPath finds the program file names as exec.LookPath does, but in the
// directories of pathEnv (the process's PATH, not the agent's) and, as
// runc does, also in a relative directory of PATH, which Go's refuses
// (exec.ErrDot).
func lookPath(file, pathEnv string) (string, error) {
	kind := func(err error) proto.ErrorKind {
		if errors.Is(err, fs.ErrPermission) {
			return proto.KindPermission
		}
		return proto.KindNotFound
	}
	if strings.Contains(file, "/") {
		if err := findExecutable(file); err != nil {
			e := &exec.Error{Name: file, Err: err}
			return "", &agentError{kind(err), e.Error()}
		}
		return file, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			// An empty entry is the working directory, as in the shell.
			dir = "."
		}
		path := filepath.Join(dir, file)
		if findExecutable(path) == nil {
			return path, nil
		}
	}
	e := &exec.Error{Name: file, Err: exec.ErrNotFound}
	return "", &agentError{proto.KindNotFound, e.Error()}
}

// findExecutable checks that file is a program the caller may run, as
// exec.LookPath does: faccessat2(2) with the caller's effective (file
// system) ids, or the mode's execute bits where the kernel cannot say.
func findExecutable(file string) error {
	d, err := os.Stat(file)
	if err != nil {
		return err
	}
	if d.IsDir() {
		return syscall.EISDIR
	}
	err = unix.Faccessat(unix.AT_FDCWD, file, unix.X_OK, unix.AT_EACCESS)
	if err == nil || (err != unix.ENOSYS && err != unix.EPERM) {
		return err
	}
	if d.Mode()&0o111 != 0 {
		return nil
	}
	return fs.ErrPermission
}

// containerEnv adds what Docker and runc add to a process environment:
// PATH when the image sets none, HOSTNAME, and HOME from the user's entry.
func containerEnv(env []string, home, hostname string) []string {
	out := append([]string(nil), env...)
	if _, ok := lookupEnv(out, "PATH"); !ok {
		out = append(out, "PATH="+defaultPath)
	}
	if _, ok := lookupEnv(out, "HOSTNAME"); !ok && hostname != "" {
		out = append(out, "HOSTNAME="+hostname)
	}
	if _, ok := lookupEnv(out, "HOME"); !ok {
		out = append(out, "HOME="+home)
	}
	return out
}

func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

func envValue(env []string, key string) string {
	v, _ := lookupEnv(env, key)
	return v
}

// rootMount is one of the kernel filesystems a container gets, at Target
// under its root.
type rootMount struct {
	Target, FSType, Source string
	Flags                  uintptr
	Data                   string
}

// rootMounts are the kernel filesystems runc gives a container, in the
// order of dockerd's spec (as /proc/mounts lists them).
func rootMounts(cfg initConfig) []rootMount {
	const (
		nsd  = unix.MS_NOSUID | unix.MS_NODEV
		nsde = nsd | unix.MS_NOEXEC
	)
	return []rootMount{
		{"proc", "proc", "proc", nsde, ""},
		{"dev", "tmpfs", "tmpfs", unix.MS_NOSUID | unix.MS_STRICTATIME, "mode=755,size=65536k"},
		{"dev/pts", "devpts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		{"sys", "sysfs", "sysfs", nsde | unix.MS_RDONLY, ""},
		// The guest's cgroup2 hierarchy, read-only, where a container on a
		// cgroup v2 host finds its own: the container's group, when it
		// has one (GuestCgroups), is /sys/fs/cgroup/container, as
		// /proc/self/cgroup says, so a runtime that sizes itself by
		// memory.max or cpu.max (the JVM, Go's GOMAXPROCS) finds them. No
		// cgroup namespace: the group may be made after the container
		// starts (docker update, pause).
		{"sys/fs/cgroup", "cgroup2", "cgroup", nsde | unix.MS_RDONLY, ""},
		{"dev/mqueue", "mqueue", "mqueue", nsde, ""},
		{"dev/shm", "tmpfs", "shm", nsde, shmData(cfg.ShmSize)},
	}
}

// devNode is a character device runc puts in a container's /dev.
type devNode struct {
	Name         string
	Major, Minor uint32
}

func devNodes() []devNode {
	return []devNode{
		{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7},
		{"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
	}
}

// devLinks are the symbolic links runc puts in a container's /dev: each
// is {target, name}.
func devLinks() [][2]string {
	return [][2]string{
		{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
		{"pts/ptmx", "ptmx"}, {"/proc/kcore", "core"},
	}
}

// deviceNodePath is where --device d goes under dev, the container's /dev.
func deviceNodePath(dev string, d proto.Device) (string, error) {
	// The host checked that d.Path is under /dev; this /dev is a tmpfs
	// made above, holding nothing the image put there.
	rel, ok := strings.CutPrefix(filepath.Clean(d.Path), "/dev/")
	if !ok || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("create device %s: not under /dev", d.Path)
	}
	return filepath.Join(dev, rel), nil
}

// etcBind is one of the agent's /etc files bound over the container's.
type etcBind struct {
	Src, Dst string
	Create   bool // the mount point is missing: create it first
}

// etcBinds are the agent's hostname, hosts and resolv.conf files to bind
// over the container's. A guest root's init layer (proto.InitLayer) always
// has them; elsewhere the mount-point files are created when missing, a
// root without /etc gets nothing, and a symlink is left alone because its
// target would be resolved outside the container root.
func etcBinds(root, etcDir string) ([]etcBind, error) {
	if etcDir == "" {
		return nil, nil
	}
	etc := filepath.Join(root, "etc")
	if st, err := os.Lstat(etc); err != nil || !st.IsDir() {
		return nil, nil
	}
	var binds []etcBind
	// dockerd's order.
	for _, name := range []string{"resolv.conf", "hostname", "hosts"} {
		src := filepath.Join(etcDir, name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		dst := filepath.Join(etc, name)
		st, err := os.Lstat(dst)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			binds = append(binds, etcBind{src, dst, true})
		case err != nil:
			return nil, fmt.Errorf("inspect %s: %w", dst, err)
		case st.Mode().IsRegular():
			binds = append(binds, etcBind{src, dst, false})
		}
	}
	return binds, nil
}
