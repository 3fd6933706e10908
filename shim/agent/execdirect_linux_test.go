//go:build linux

package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// An exec is started directly by the agent unless it has resource limits,
// when the C init starts it. Both ways give the program the same
// user, groups, capabilities, working directory, environment and terminal,
// and refuse the same things with the same errors: each case runs both
// ways (a nofile limit equal to the agent's own sends it through the init)
// and must give what it wants each time.
func TestExecDirectMatchesInit(t *testing.T) {
	var log syncBuffer
	root := makeRoot(t)
	a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(root), StateDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	f := &fixture{agent: a, root: root}
	if err := os.Chmod(filepath.Join(f.root, "root"), 0o700); err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(filepath.Join(f.root, "bin/busybox"))
	if err != nil {
		t.Fatal(err)
	}
	// busybox runs the applet its file is named after.
	if err := os.Mkdir(filepath.Join(f.root, "opt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.root, "opt/true"), bb, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.root, "rel"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/busybox", filepath.Join(f.root, "rel/true")); err != nil {
		t.Fatal(err)
	}
	c, _ := f.connect(t)
	setup(t, c)
	if _, err := c.Start(ctx(t), "main", proto.ProcessSpec{Args: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	throughInit := []proto.Rlimit{{Type: "nofile", Soft: int64(lim.Cur), Hard: int64(lim.Max)}}

	tests := []startCase{
		{name: "relative directory in PATH", spec: proto.ProcessSpec{Args: []string{"true"}, Env: []string{"PATH=rel"}, Cwd: "/"}},
		{name: "bounding set", spec: proto.ProcessSpec{Args: []string{"grep", "CapBnd", "/proc/self/status"}, Capabilities: &proto.Capabilities{Bounding: []string{"CAP_CHOWN"}}},
			stdout: "CapBnd:\t0000000000000001\n"},
		{name: "root runs a root-only program", spec: proto.ProcessSpec{Args: []string{"/opt/true"}}},
		{name: "user cannot run a root-only program", spec: proto.ProcessSpec{Args: []string{"/opt/true"}, User: "app"},
			kind: proto.KindPermission, msg: `exec: "/opt/true": permission denied`},
		{name: "user cannot enter root's home", spec: proto.ProcessSpec{Args: []string{"pwd"}, User: "app", Cwd: "/root"},
			kind: proto.KindPermission, msg: `chdir to cwd ("/root") set in config.json failed: permission denied`},
		{name: "root enters its home", spec: proto.ProcessSpec{Args: []string{"pwd"}, Cwd: "/root"}, stdout: "/root\n"},
		{name: "missing working directory", spec: proto.ProcessSpec{Args: []string{"pwd"}, Cwd: "/nope"},
			kind: proto.KindInternal, msg: `chdir to cwd ("/nope") set in config.json failed: no such file or directory`},
		{name: "unknown user", spec: proto.ProcessSpec{Args: []string{"id"}, User: "nope"},
			kind: proto.KindUser, msg: "unable to find user nope: no matching entries in passwd file"},
		{name: "command not in PATH", spec: proto.ProcessSpec{Args: []string{"nope"}},
			kind: proto.KindNotFound, msg: `exec: "nope": executable file not found in $PATH`},
		{name: "not executable", spec: proto.ProcessSpec{Args: []string{"/etc/notexec"}},
			kind: proto.KindPermission, msg: `exec: "/etc/notexec": permission denied`},
		{name: "terminal", spec: proto.ProcessSpec{Args: []string{"sh", "-c", "tty | grep -q '^/dev/pts/' && echo pts; [ -O $(tty) ] && echo owner; stty size; id -u"},
			User: "app", Terminal: true, ConsoleSize: &proto.WindowSize{Rows: 33, Cols: 77}},
			stdout: "pts\r\nowner\r\n33 77\r\n1000\r\n"},
		{name: "terminal, command not in PATH", spec: proto.ProcessSpec{Args: []string{"nope"}, Terminal: true},
			kind: proto.KindNotFound, msg: `exec: "nope": executable file not found in $PATH`},
	}
	tests = append(tests, identityCases()...)
	n := 0
	for _, tt := range tests {
		for _, way := range []string{"direct", "init"} {
			t.Run(tt.name+"/"+way, func(t *testing.T) {
				spec := tt.spec
				spec.ExecOf = "main"
				if way == "init" {
					spec.Rlimits = throughInit
				}
				n++
				tt.spec = spec
				checkStart(t, c, &log, fmt.Sprintf("x%d", n), tt, fmt.Sprintf("direct=%v", way == "direct"))
			})
		}
	}
	// An exec's limits are its own, and the init hands it no descriptor
	// of the init's binary.
	t.Run("limits of an exec", func(t *testing.T) {
		n++
		checkStart(t, c, &log, fmt.Sprintf("x%d", n), startCase{spec: proto.ProcessSpec{ExecOf: "main",
			Args:    []string{"sh", "-c", "ulimit -n; ulimit -Hn; echo $(ls -l /proc/$$/fd | grep -c husk-init)"},
			Rlimits: []proto.Rlimit{{Type: "nofile", Soft: 100, Hard: 200}}}, stdout: "100\n200\n0\n"}, "direct=false")
	})
}

// startCase is one process start and what it must give (checkStart).
type startCase struct {
	name   string
	spec   proto.ProcessSpec
	stdout string
	kind   proto.ErrorKind
	msg    string
}

// identityCases are the user, groups, home and environment a process gets
// in the root of makeRoot, as every way of starting one must give them.
func identityCases() []startCase {
	return []startCase{
		{name: "root", spec: proto.ProcessSpec{Args: []string{"sh", "-c", "id; pwd"}},
			stdout: "uid=0(root) gid=0(root) groups=0(root)\n/\n"},
		{name: "user, groups and home", spec: proto.ProcessSpec{Args: []string{"sh", "-c", "id; pwd; echo $HOME"}, User: "app", Cwd: "/home/app"},
			stdout: "uid=1000(app) gid=1000(app) groups=50(staff),1000(app)\n/home/app\n/home/app\n"},
		{name: "numeric user and group", spec: proto.ProcessSpec{Args: []string{"id"}, User: "4242:4343"},
			stdout: "uid=4242 gid=4343 groups=4343\n"},
		{name: "environment", spec: proto.ProcessSpec{Args: []string{"sh", "-c", "echo $X $HOSTNAME $PATH"}, Env: []string{"X=1"}},
			stdout: "1 husky /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"},
	}
}

// checkStart starts tc.spec as process id on c, and requires it to exit 0
// having written tc.stdout, or, where tc.kind is set, to be refused with
// an agent error of that kind and message tc.msg. A process that starts
// must have the agent's "process started" debug line in log, with logged.
func checkStart(t *testing.T, c *host.Client, log *syncBuffer, id string, tc startCase, logged string) {
	t.Helper()
	stdout, kind, msg := tc.stdout, tc.kind, tc.msg
	p, err := c.Start(ctx(t), id, tc.spec)
	if kind != "" {
		var ae *host.AgentError
		if !errors.As(err, &ae) || ae.Kind != kind || ae.Message != msg {
			t.Fatalf("start: %v, want %s %q", err, kind, msg)
		}
		return
	}
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	r := collect(t, p)
	if r.exit.Code != 0 || r.stdout != stdout {
		t.Errorf("exit %d, stdout %q (stderr %q), want 0, %q", r.exit.Code, r.stdout, strings.TrimSpace(r.stderr), stdout)
	}
	started := fmt.Sprintf(`msg="process started" id=%s pid=%d args=`, id, p.Pid())
	if !log.hasLine(started, logged) {
		t.Errorf("no debug line with %q and %q in\n%s", started, logged, log.String())
	}
}

// syncBuffer is a log's destination that tests read while the agent
// writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// hasLine says whether a line holds all of parts.
func (b *syncBuffer) hasLine(parts ...string) bool {
	return slices.ContainsFunc(strings.Split(b.String(), "\n"), func(line string) bool {
		return !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) })
	})
}
