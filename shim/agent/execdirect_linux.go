//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A direct exec starts an exec's program from the agent itself, with no
// init in between.
//
// Why: under TCG a restored VM starts with an empty translation cache, and
// the init then was the agent's binary, whose Go runtime start and package
// initialisers ran afresh in every init. After a checkpoint restore, the
// first `docker exec` spent 160-230 ms between the fork and the init's
// main; a direct exec had the program running ~130 ms after the spawn
// began, namespaces included. Measured through the docker CLI on two
// daemons side by side (2-core host, TCG, ABBA order): `docker start
// --checkpoint` and a first `docker exec true`, medians 1529 ms through
// the init and 1305 ms direct (n=16 each); `docker exec true` into a
// running container, 143 ms and 101 ms (n=20 each).
//
// What the init does for an exec is done here on the thread that joined
// the container's namespaces (inNamespacesOf): the chroot, the user's
// lookup, the capability bounding set and the working directory are all
// per thread (the thread's filesystem attributes are unshared), and the
// thread is thrown away afterwards. The rest is what Go's fork does in
// the child: the cgroup (clone3's CLONE_INTO_CGROUP), the session and the
// user's ids, and for a terminal (opened here, in the container's devpts)
// the controlling terminal. Resource limits are per process, so an exec
// with any goes through the C init (startExecInit).

// canExecDirectly says whether the process cfg describes, an exec
// (cfg.Process.ExecOf) into a running container, can be started directly.
func canExecDirectly(cfg initConfig) bool {
	// oom_score_adj is the whole process's, so the agent's thread
	// cannot set it for the child alone: the C init does.
	return cfg.Process.ExecOf != "" && len(cfg.Process.Rlimits) == 0 &&
		!cfg.Mounts && cfg.InitBinary == "" && cfg.Exe == "" && cfg.OomScoreAdj == 0
}

// execDirectly starts cfg's program with stdio as its standard streams, in
// the cgroup whose directory is open as cgroup (when not nil). It must run
// on a locked thread of its own inside the container's namespaces. A
// program with a terminal gets one opened in the container's devpts as its
// stdio and controlling terminal instead, and its master side is returned.
func execDirectly(cfg initConfig, stdio []*os.File, cgroup *os.File) (*os.Process, *os.File, error) {
	spec := cfg.Process
	u, env, cwd, err := enterRoot(cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := boundCapabilities(spec.Capabilities, cfg.LastCap); err != nil {
		return nil, nil, err
	}
	path, err := enterAsUser(u, cwd, spec.Args[0], env)
	if err != nil {
		return nil, nil, err
	}
	if spec.NoNewPrivileges {
		// The thread is thrown away after the start (inNamespacesOf),
		// and the flag, which nothing unsets, goes with it.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return nil, nil, fmt.Errorf("set no_new_privs: %w", err)
		}
	}
	sys := &syscall.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: uint32s(u.Groups)},
	}
	if cgroup != nil {
		sys.UseCgroupFD, sys.CgroupFD = true, int(cgroup.Fd())
	}
	var master *os.File
	if spec.Terminal {
		m, slave, err := openTerminal(spec.ConsoleSize, u.UID)
		if err != nil {
			return nil, nil, err
		}
		defer slave.Close()
		master, stdio = m, []*os.File{slave, slave, slave}
		sys.Setctty, sys.Ctty = true, 0
	}
	p, err := os.StartProcess(path, spec.Args, &os.ProcAttr{Env: env, Files: stdio, Sys: sys})
	if err != nil {
		if master != nil {
			master.Close()
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, nil, execError(path, err)
	}
	return p, master, nil
}

// enterAsUser makes cwd the calling thread's working directory and finds
// the program file arg0 names, both as the user u, as an init checks them
// after its setuid: with the thread's file-system ids and groups the
// user's. The thread's working directory is what the program inherits.
func enterAsUser(u execUser, cwd, arg0 string, env []string) (path string, _ error) {
	err := withFileCredentials(u, func() error {
		if err := unix.Chdir(cwd); err != nil {
			return cwdError(cwd, err)
		}
		var err error
		path, err = lookPath(arg0, envValue(env, "PATH"))
		return err
	})
	return path, err
}

// uint32s converts ids for the kernel's and syscall's types.
func uint32s(ids []int) []uint32 {
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

// withFileCredentials runs check with the calling thread's file-system
// ids and supplementary groups those of u, then gives the thread back
// root's. It changes the thread alone: setfsuid(2) and setfsgid(2) are
// per thread, and so is the raw setgroups(2) (Go's syscall.Setgroups
// changes every thread of the agent).
func withFileCredentials(u execUser, check func() error) (err error) {
	if u.UID == 0 && u.GID == 0 {
		return check()
	}
	orig, err := unix.Getgroups()
	if err != nil {
		return fmt.Errorf("get groups: %w", err)
	}
	if err := threadSetgroups(u.Groups); err != nil {
		return err
	}
	defer func() {
		_, _ = unix.SetfsuidRetUid(0)
		_, _ = unix.SetfsgidRetGid(0)
		if rerr := threadSetgroups(orig); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if uid, _ := unix.SetfsuidRetUid(-1); uid != 0 {
			err = errors.Join(err, fmt.Errorf("file-system uid still %d", uid))
		}
	}()
	_, _ = unix.SetfsgidRetGid(u.GID)
	_, _ = unix.SetfsuidRetUid(u.UID)
	// setfsuid(2) reports no failure; an invalid id reads back the old one.
	if gid, _ := unix.SetfsgidRetGid(-1); gid != u.GID {
		return fmt.Errorf("set file-system gid %d: still %d", u.GID, gid)
	}
	if uid, _ := unix.SetfsuidRetUid(-1); uid != u.UID {
		return fmt.Errorf("set file-system uid %d: still %d", u.UID, uid)
	}
	return check()
}

// threadSetgroups sets the calling thread's supplementary groups.
func threadSetgroups(groups []int) error {
	list := uint32s(groups)
	var p unsafe.Pointer
	if len(list) > 0 {
		p = unsafe.Pointer(&list[0])
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(list)), uintptr(p), 0); errno != 0 {
		return fmt.Errorf("setgroups %v: %w", groups, errno)
	}
	return nil
}
