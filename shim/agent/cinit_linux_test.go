//go:build linux

package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// A main process is started by the C init, which gives the program its
// PID namespace, mounts, hostname, user, groups, limits, capabilities,
// working directory and environment, and refuses what runc refuses with
// the errors the agent's Go init gave when it started main processes.
func TestMainProcessStart(t *testing.T) {
	type agentUnderTest struct {
		c   *host.Client
		log *syncBuffer
	}
	newAgent := func(settings *proto.ContainerSettings) agentUnderTest {
		root := makeRoot(t)
		for _, f := range []struct {
			name string
			mode os.FileMode
			data string
		}{
			{"bin/garbage", 0o755, "\x00\x01 not a program"},
			{"etc/hosts", 0o644, "image hosts\n"},
			{".staged/0", 0o400, "s3cret"},
			{".staged/1/f", 0o644, "from the context\n"},
		} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f.name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, f.name), []byte(f.data), f.mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(filepath.Join(root, "root"), 0o700); err != nil {
			t.Fatal(err)
		}
		a, log := debugAgent(t, root)
		c, _ := (&fixture{agent: a, root: root}).connect(t)
		if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky", Settings: settings}); err != nil {
			t.Fatalf("setup: %v", err)
		}
		return agentUnderTest{c, log}
	}
	plain, withInit := newAgent(nil), newAgent(&proto.ContainerSettings{Init: true})
	initScript := `tr '\0' ' ' </proc/1/cmdline; echo; [ $$ -ne 1 ] && echo child; grep ' /sbin/docker-init ' /proc/mounts | cut -d' ' -f4 | cut -d, -f1; pwd`
	initCases := []startCase{
		{name: "--init", spec: proto.ProcessSpec{Args: []string{"sh", "-c", initScript}, Cwd: "/made/by/init"},
			stdout: "/sbin/docker-init -- sh -c " + initScript + " \nchild\nro\n/made/by/init\n"},
		{name: "--init, command not in PATH", spec: proto.ProcessSpec{Args: []string{"nope"}},
			kind: proto.KindNotFound, msg: `exec: "nope": executable file not found in $PATH`},
	}

	tests := []startCase{
		{name: "namespaces, mounts and /etc", spec: proto.ProcessSpec{Args: []string{"sh", "-c",
			"echo $$; hostname; cat /etc/hostname; ls /dev | tr '\\n' ' '; echo; grep -c localhost /etc/hosts; cut -d' ' -f2 /proc/mounts | grep -v '^/$' | tr '\\n' ' '"}},
			stdout: "1\nhusky\nhusky\ncore fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero \n2\n" +
				"/proc /dev /dev/pts /sys /sys/fs/cgroup /dev/mqueue /dev/shm /etc/hostname /etc/hosts "},
		{name: "relative directory in PATH", spec: proto.ProcessSpec{Args: []string{"pwd"}, Env: []string{"PATH=bin"}, Cwd: "/"},
			stdout: "/\n"},
		{name: "limits", spec: proto.ProcessSpec{Args: []string{"sh", "-c", "ulimit -n; ulimit -Hn"}, Rlimits: []proto.Rlimit{{Type: "nofile", Soft: 100, Hard: 200}}},
			stdout: "100\n200\n"},
		{name: "bounding set", spec: proto.ProcessSpec{Args: []string{"grep", "CapBnd", "/proc/self/status"}, Capabilities: &proto.Capabilities{Bounding: []string{"CAP_CHOWN"}}},
			stdout: "CapBnd:\t0000000000000001\n"},
		{name: "an environment bigger than a pipe", spec: proto.ProcessSpec{Args: []string{"sh", "-c", "echo ${#BIG}"}, Env: []string{"BIG=" + strings.Repeat("x", 100<<10)}},
			stdout: "102400\n"},
		{name: "the umask is the agent's", spec: proto.ProcessSpec{Args: []string{"sh", "-c", "umask"}},
			stdout: fmt.Sprintf("%04o\n", currentUmask())},
		{name: "missing working directory is created", spec: proto.ProcessSpec{Args: []string{"sh", "-c", "pwd; stat -c '%U %a' ."}, User: "app", Cwd: "/new/dir"},
			stdout: "/new/dir\nroot 755\n"},
		{name: "working directory under /dev", spec: proto.ProcessSpec{Args: []string{"pwd"}, Cwd: "/dev/work"},
			stdout: "/dev/work\n"},
		{name: "working directory is a file", spec: proto.ProcessSpec{Args: []string{"pwd"}, Cwd: "/etc/notexec/dir"},
			kind: proto.KindInternal, msg: "create working directory /etc/notexec/dir: mkdir /etc/notexec: not a directory"},
		{name: "working directory is a file itself", spec: proto.ProcessSpec{Args: []string{"pwd"}, Cwd: "/etc/notexec"},
			kind: proto.KindConfig, msg: "Cannot mkdir: /etc/notexec is not a directory"},
		{name: "user cannot enter root's home", spec: proto.ProcessSpec{Args: []string{"pwd"}, User: "app", Cwd: "/root"},
			kind: proto.KindPermission, msg: `chdir to cwd ("/root") set in config.json failed: permission denied`},
		{name: "invalid ulimit", spec: proto.ProcessSpec{Args: []string{"true"}, Rlimits: []proto.Rlimit{{Type: "nope", Soft: 1, Hard: 1}}},
			kind: proto.KindInvalid, msg: "invalid ulimit type: nope"},
		{name: "unknown capability", spec: proto.ProcessSpec{Args: []string{"true"}, Capabilities: &proto.Capabilities{Bounding: []string{"CAP_NOPE"}}},
			kind: proto.KindInvalid, msg: `unknown capability "CAP_NOPE"`},
		{name: "unknown user", spec: proto.ProcessSpec{Args: []string{"id"}, User: "nope"},
			kind: proto.KindUser, msg: "unable to find user nope: no matching entries in passwd file"},
		{name: "command not in PATH", spec: proto.ProcessSpec{Args: []string{"nope"}},
			kind: proto.KindNotFound, msg: `exec: "nope": executable file not found in $PATH`},
		{name: "not executable", spec: proto.ProcessSpec{Args: []string{"/etc/notexec"}},
			kind: proto.KindPermission, msg: `exec: "/etc/notexec": permission denied`},
		{name: "exec fails", spec: proto.ProcessSpec{Args: []string{"garbage"}},
			kind: proto.KindInternal, msg: "exec /bin/garbage: exec format error"},
		{name: "terminal", spec: proto.ProcessSpec{Args: []string{"sh", "-c", "tty | grep -q '^/dev/pts/' && echo pts; [ -O $(tty) ] && echo owner; stty size; id -u; ls /dev/pts"},
			User: "app", Terminal: true, ConsoleSize: &proto.WindowSize{Rows: 33, Cols: 77}},
			stdout: "pts\r\nowner\r\n33 77\r\n1000\r\n0     ptmx\r\n"},
		{name: "terminal, command not in PATH", spec: proto.ProcessSpec{Args: []string{"nope"}, Terminal: true},
			kind: proto.KindNotFound, msg: `exec: "nope": executable file not found in $PATH`},
		{name: "tmpfs of its own", spec: proto.ProcessSpec{Args: []string{"sh", "-c",
			"grep ' /cache/x ' /proc/mounts | cut -d' ' -f1,3; echo f > /cache/x/f; stat -c '%a %u:%g' /cache/x"},
			Tmpfs: []proto.ProcessTmpfs{{Target: "/cache/x", Mode: 0o1777, UID: 1000, GID: 1000}}},
			stdout: "tmpfs tmpfs\n1777 1000:1000\n"},
		{name: "binds of its own", spec: proto.ProcessSpec{Args: []string{"sh", "-c",
			"cat /run/secrets/tok; echo; cat /src/f; touch /src/x 2>&1 | grep -o 'Read-only file system'; echo rw > /rw/f && echo written"},
			Binds: []proto.ProcessBind{{Source: "/.staged/0", Target: "/run/secrets/tok", ReadOnly: true},
				{Source: "/.staged/1", Target: "/src", Dir: true, ReadOnly: true}, {Source: "/.staged/1", Target: "/rw", Dir: true}},
			Staged: "/.staged"},
			stdout: "s3cret\nfrom the context\nRead-only file system\nwritten\n"},
		{name: "tmpfs under a file", spec: proto.ProcessSpec{Args: []string{"pwd"}, Tmpfs: []proto.ProcessTmpfs{{Target: "/etc/notexec/x"}}},
			kind: proto.KindInternal, msg: "create mount point /etc/notexec/x: mkdir /etc/notexec/x: not a directory"},
	}
	tests = append(tests, identityCases()...)
	t.Cleanup(func() { threadsShareRoot(t) })
	n := 0
	run := func(a agentUnderTest, tests []startCase) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				n++
				checkStart(t, a.c, a.log, fmt.Sprintf("p%d", n), tt, "cinit=true")
			})
		}
	}
	run(plain, tests)
	run(withInit, initCases)

	// As runc: a masked file reads empty (the container's /dev/null, so
	// its mount is of /dev's filesystem), a masked directory lists
	// nothing and takes no writes, a read-only path takes no writes, and
	// a path the guest lacks is skipped.
	masked := newAgent(&proto.ContainerSettings{
		MaskedPaths:   []string{"/proc/version", "/proc/sys/fs", "/proc/nope"},
		ReadonlyPaths: []string{"/proc/sys", "/proc/nope"},
	})
	run(masked, []startCase{{name: "masked and read-only paths", spec: proto.ProcessSpec{Args: []string{"sh", "-c",
		"wc -c </proc/version; ls /proc/sys/fs | wc -l; touch /proc/sys/fs/x 2>&1 | grep -o 'Read-only file system'; " +
			"(echo 1 >/proc/sys/kernel/ns_last_pid) 2>&1 | grep -o 'Read-only file system'; grep ' /proc/sys ' /proc/mounts | cut -d' ' -f4; " +
			"[ \"$(grep ' /proc/version ' /proc/mounts | cut -d' ' -f1,3,4)\" = \"$(grep ' /dev ' /proc/mounts | cut -d' ' -f1,3,4)\" ] && echo null"}},
		stdout: "0\n0\nRead-only file system\nRead-only file system\nro,nosuid,nodev,noexec,relatime\nnull\n"}})
}

// TestDockerInit: under --init the C init's binary is PID 1 as tini would
// be: the command's exit code is its own, a command killed by a signal
// exits 128+signal, signals sent to the container reach the command, and
// orphans are reaped.
func TestDockerInit(t *testing.T) {
	f := &fixture{root: makeRoot(t)}
	a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(f.root), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	f.agent = a
	c, _ := f.connect(t)
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky", Settings: &proto.ContainerSettings{Init: true}}); err != nil {
		t.Fatalf("setup: %v", err)
	}
	tests := []struct {
		name   string
		script string
		signal bool // send SIGTERM once the script printed "ready"
		stdout string
		code   int
	}{
		{name: "exit code", script: "exit 3", code: 3},
		{name: "killed by a signal", script: "kill -KILL $$", code: 137},
		{name: "signal forwarded", script: `trap "exit 7" TERM; echo ready; while :; do sleep 0.1; done`, signal: true, stdout: "ready\n", code: 7},
		{name: "orphans reaped", script: `sh -c "sleep 0.1 &"; sleep 1; echo $(cat /proc/[0-9]*/stat | grep -c ') Z ')`, stdout: "0\n"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := c.Start(ctx(t), fmt.Sprintf("d%d", i), proto.ProcessSpec{Args: []string{"sh", "-c", tt.script}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.Stdout(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if tt.signal {
				ready := make([]byte, len("ready\n"))
				if _, err := io.ReadFull(out, ready); err != nil {
					t.Fatal(err)
				}
				if err := p.Signal(ctx(t), syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				out = io.NopCloser(io.MultiReader(bytes.NewReader(ready), out))
			}
			// Waited for first: a command that never ends fails the
			// wait (testTimeout), where reading its output would hang.
			exit, err := p.Wait(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(out)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.stdout || exit.Code != tt.code {
				t.Errorf("stdout %q, exit %+v; want %q, code %d", b, exit, tt.stdout, tt.code)
			}
		})
	}
}

// threadsShareRoot checks that every thread of the test process (the
// agent's) has the process's root and working directory: the threads the
// agent chroots to resolve a program go back to the scheduler afterwards.
// A thread restores itself after it has answered, so the check is retried
// for a while before it fails.
func threadsShareRoot(t *testing.T) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var strays []string
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(10 * time.Millisecond) {
		tasks, err := filepath.Glob("/proc/self/task/*")
		if err != nil || len(tasks) == 0 {
			t.Fatalf("list threads: %v", err)
		}
		strays = strays[:0]
		for _, task := range tasks {
			root, rerr := os.Readlink(filepath.Join(task, "root"))
			cwd, cerr := os.Readlink(filepath.Join(task, "cwd"))
			if errors.Is(rerr, fs.ErrNotExist) || errors.Is(cerr, fs.ErrNotExist) {
				continue // the thread exited meanwhile
			}
			if rerr != nil || cerr != nil || root != "/" || cwd != wd {
				strays = append(strays, fmt.Sprintf("thread %s: root %q (%v), cwd %q (%v)", filepath.Base(task), root, rerr, cwd, cerr))
			}
		}
		if len(strays) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads not back in / and %s:\n%s", wd, strings.Join(strays, "\n"))
		}
	}
}

// currentUmask reads the process's umask without changing it for long.
func currentUmask() int {
	old := syscall.Umask(0)
	syscall.Umask(old)
	return old
}

// TestZygote: after a mount-root, the main process starts in the zygote
// the agent started then, and sees what an init of its own would have
// given it. A second start, a start after one the lookup refused, and the
// start of a container the zygote does not fit start their own init.
func TestZygote(t *testing.T) {
	newAgent := func(setup proto.SetupSpec) (*host.Client, *syncBuffer) {
		root := makeRoot(t)
		for _, m := range setup.Mounts {
			t.Cleanup(func() { _ = unix.Unmount(filepath.Join(root, m.Target), unix.MNT_DETACH) })
		}
		a, log := debugAgent(t, root)
		c, _ := (&fixture{agent: a, root: root}).connect(t)
		if err := c.MountRoot(ctx(t), proto.MountRootSpec{BaseSerial: "b", UpperSerial: "u"}); err != nil {
			t.Fatalf("mount-root: %v", err)
		}
		setup.Hostname, setup.BaseSerial, setup.UpperSerial = "husky", "b", "u"
		if err := c.Setup(ctx(t), setup); err != nil {
			t.Fatalf("setup: %v", err)
		}
		return c, log
	}
	view := startCase{name: "namespaces, mounts and /etc", spec: proto.ProcessSpec{Args: []string{"sh", "-c",
		"echo $$; hostname; cat /etc/hostname; ls /dev | tr '\\n' ' '; echo; cut -d' ' -f2 /proc/mounts | grep -v '^/$' | tr '\\n' ' '; df -k /dev/shm | tail -1 | tr -s ' ' | cut -d' ' -f2"}},
		stdout: "1\nhusky\nhusky\ncore fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero \n" +
			"/proc /dev /dev/pts /sys /sys/fs/cgroup /dev/mqueue /dev/shm /etc/hostname /etc/hosts 65536\n"}
	refused := startCase{name: "command not in PATH", spec: proto.ProcessSpec{Args: []string{"nope"}},
		kind: proto.KindNotFound, msg: `exec: "nope": executable file not found in $PATH`}
	t.Cleanup(func() { threadsShareRoot(t) })

	t.Run("taken once", func(t *testing.T) {
		c, log := newAgent(proto.SetupSpec{})
		checkStart(t, c, log, "main", view, "zygote=true")
		checkStart(t, c, log, "again", view, "zygote=false")
	})
	t.Run("lookup refused", func(t *testing.T) {
		c, log := newAgent(proto.SetupSpec{})
		checkStart(t, c, log, "main", refused, "")
		checkStart(t, c, log, "again", view, "zygote=false")
	})
	t.Run("another /dev/shm", func(t *testing.T) {
		c, log := newAgent(proto.SetupSpec{Settings: &proto.ContainerSettings{ShmSize: 1 << 20}})
		shm := view
		shm.stdout = strings.Replace(view.stdout, " 65536\n", " 1024\n", 1)
		checkStart(t, c, log, "main", shm, "zygote=false")
	})
	t.Run("a zygote that fails", func(t *testing.T) {
		root := makeRoot(t)
		if err := os.RemoveAll(filepath.Join(root, "dev")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "dev"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		a, log := debugAgent(t, root)
		c, _ := (&fixture{agent: a, root: root}).connect(t)
		if err := c.MountRoot(ctx(t), proto.MountRootSpec{BaseSerial: "b", UpperSerial: "u"}); err != nil {
			t.Fatalf("mount-root with a zygote that cannot start: %v", err)
		}
		if want := "start zygote: create mount point " + filepath.Join(root, "dev"); !strings.Contains(log.String(), want) {
			t.Errorf("no %q in the agent's log:\n%s", want, log.String())
		}
	})
	t.Run("a tmpfs in the root", func(t *testing.T) {
		c, log := newAgent(proto.SetupSpec{Mounts: []proto.MountSpec{{Type: proto.MountTmpfs, Target: "/scratch"}}})
		checkStart(t, c, log, "main", startCase{name: "tmpfs", spec: proto.ProcessSpec{Args: []string{"sh", "-c", "grep -c ' /scratch ' /proc/mounts"}}, stdout: "1\n"}, "zygote=false")
	})
}

// debugAgent is an agent on the directory root whose debug log the test
// reads.
func debugAgent(t *testing.T, root string) (*agent.Agent, *syncBuffer) {
	t.Helper()
	log := &syncBuffer{}
	a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(root), StateDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, log
}
