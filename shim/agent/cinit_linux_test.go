//go:build linux

package agent_test

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

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
		log := &syncBuffer{}
		root := makeRoot(t)
		for _, f := range []struct {
			name string
			mode os.FileMode
			data string
		}{
			{"bin/garbage", 0o755, "\x00\x01 not a program"},
			{"etc/hosts", 0o644, "image hosts\n"},
		} {
			if err := os.WriteFile(filepath.Join(root, f.name), []byte(f.data), f.mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(filepath.Join(root, "root"), 0o700); err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(root), StateDir: t.TempDir(),
			Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		c, _ := (&fixture{agent: a, root: root}).connect(t)
		if settings == nil {
			setup(t, c)
		} else {
			// --init's init is this test binary, which needs its
			// loader and libraries in the root.
			copyLoader(t, root)
			if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky", Settings: settings}); err != nil {
				t.Fatalf("setup: %v", err)
			}
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
				"/proc /sys /dev /dev/pts /dev/shm /dev/mqueue /etc/hostname /etc/hosts "},
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
}

// copyLoader copies the dynamic loader and libraries of the test binary
// (ldd's list) into root, at their paths.
func copyLoader(t *testing.T, root string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ldd", exe).Output()
	if err != nil {
		// A static test binary needs nothing.
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if !filepath.IsAbs(f) {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(root, f)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// threadsShareRoot checks that every thread of the test process (the
// agent's) has the process's root and working directory: the threads the
// agent chroots to resolve a program go back to the scheduler afterwards.
func threadsShareRoot(t *testing.T) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := filepath.Glob("/proc/self/task/*")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("list threads: %v", err)
	}
	for _, task := range tasks {
		root, rerr := os.Readlink(filepath.Join(task, "root"))
		cwd, cerr := os.Readlink(filepath.Join(task, "cwd"))
		if rerr != nil || cerr != nil || root != "/" || cwd != wd {
			t.Errorf("thread %s: root %q (%v), cwd %q (%v); want / and %s", filepath.Base(task), root, rerr, cwd, cerr, wd)
		}
	}
}

// currentUmask reads the process's umask without changing it for long.
func currentUmask() int {
	old := syscall.Umask(0)
	syscall.Umask(old)
	return old
}
