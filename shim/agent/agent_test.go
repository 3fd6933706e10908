//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/agent/cinit"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// testInitExe is the container init the tests' agents start main
// processes with (cinit/src/init.c, built by TestMain), or "" where no C
// compiler is installed.
var testInitExe string

func TestMain(m *testing.M) {
	// The agent re-executes this test binary as its archive helper.
	agent.Reexec()
	os.Exit(cinit.RunTests(m.Run, &testInitExe))
}

// testTimeout only guards against a hung test; no assertion depends on it.
const testTimeout = 60 * time.Second

// makeRoot builds a container root from busybox with an app user (1000)
// and a staff group (50) that app belongs to.
func makeRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: container processes run in new namespaces under chroot")
	}
	if testInitExe == "" {
		t.Skip("needs a C compiler (musl-gcc or cc) to build the container init")
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("needs a static busybox at /bin/busybox: %v", err)
	}
	root := t.TempDir()
	for _, d := range []string{"bin", "etc", "home/app", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "echo", "cat", "id", "sleep", "pwd", "hostname", "ls", "seq", "env", "tr", "grep", "tty", "stty"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"etc/passwd":  "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n",
		"etc/group":   "root:x:0:\nstaff:x:50:app\napp:x:1000:\n",
		"etc/notexec": "just text\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

type fixture struct {
	agent *agent.Agent
	root  string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := makeRoot(t)
	a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(root), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return &fixture{agent: a, root: root}
}

// connect starts a session over an in-memory pipe and returns its client
// and a function that ends the session from the host side, returning once
// the agent has let go of it.
func (f *fixture) connect(t *testing.T) (*host.Client, func()) {
	t.Helper()
	hostEnd, agentEnd := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- f.agent.ServeConn(context.Background(), agentEnd) }()
	c, err := host.New(hostEnd)
	if err != nil {
		t.Fatal(err)
	}
	var ended bool
	end := func() {
		if ended {
			return
		}
		ended = true
		c.Close()
		hostEnd.Close()
		<-done
	}
	t.Cleanup(end)
	return c, end
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return c
}

func setup(t *testing.T, c *host.Client) {
	t.Helper()
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky"}); err != nil {
		t.Fatalf("setup: %v", err)
	}
}

type result struct {
	stdout, stderr string
	exit           proto.ExitStatus
}

// collect attaches to stdout and stderr and reads both to EOF, then waits.
func collect(t *testing.T, p *host.Process) result {
	t.Helper()
	var r result
	read := func(open func(context.Context) (io.ReadCloser, error), dst *string) chan error {
		ch := make(chan error, 1)
		rc, err := open(ctx(t))
		if err != nil {
			ch <- err
			return ch
		}
		go func() {
			defer rc.Close()
			b, err := io.ReadAll(rc)
			*dst = string(b)
			ch <- err
		}()
		return ch
	}
	outErr := read(p.Stdout, &r.stdout)
	errErr := read(p.Stderr, &r.stderr)
	if err := <-outErr; err != nil {
		t.Fatalf("stdout: %v", err)
	}
	if err := <-errErr; err != nil {
		t.Fatalf("stderr: %v", err)
	}
	exit, err := p.Wait(ctx(t))
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	r.exit = exit
	return r
}

func run(t *testing.T, c *host.Client, id string, spec proto.ProcessSpec) result {
	t.Helper()
	p, err := c.Start(ctx(t), id, spec)
	if err != nil {
		t.Fatalf("start %v: %v", spec.Args, err)
	}
	return collect(t, p)
}

func TestProcesses(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)

	tests := []struct {
		name   string
		spec   proto.ProcessSpec
		stdout string
		stderr string
		code   int
	}{
		{
			name:   "stdout and stderr kept apart",
			spec:   proto.ProcessSpec{Args: []string{"sh", "-c", "echo out; echo err >&2; echo out2"}},
			stdout: "out\nout2\n",
			stderr: "err\n",
		},
		{
			name: "exit code",
			spec: proto.ProcessSpec{Args: []string{"sh", "-c", "exit 3"}},
			code: 3,
		},
		{
			name:   "env, default PATH, HOME and HOSTNAME",
			spec:   proto.ProcessSpec{Args: []string{"sh", "-c", `echo "$FOO|$PATH|$HOME|$HOSTNAME"`}, Env: []string{"FOO=bar"}},
			stdout: "bar|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|/root|husky\n",
		},
		{
			name:   "missing working directory is created",
			spec:   proto.ProcessSpec{Args: []string{"pwd"}, Cwd: "/work/dir"},
			stdout: "/work/dir\n",
		},
		{
			name:   "default working directory",
			spec:   proto.ProcessSpec{Args: []string{"pwd"}},
			stdout: "/\n",
		},
		{
			name:   "hostname",
			spec:   proto.ProcessSpec{Args: []string{"hostname"}},
			stdout: "husky\n",
		},
		{
			name:   "pid 1 of its own namespace with its own /proc",
			spec:   proto.ProcessSpec{Args: []string{"sh", "-c", "echo $$; ls /proc/1/exe >/dev/null && echo proc"}},
			stdout: "1\nproc\n",
		},
		{
			name:   "user by name gets home and supplementary groups",
			spec:   proto.ProcessSpec{Args: []string{"sh", "-c", "id -u; id -g; id -G; echo $HOME"}, User: "app"},
			stdout: "1000\n1000\n1000 50\n/home/app\n",
		},
		{
			// runc lists the primary group after the memberships.
			name:   "supplementary groups as runc sets them",
			spec:   proto.ProcessSpec{Args: []string{"id"}, User: "app"},
			stdout: "uid=1000(app) gid=1000(app) groups=50(staff),1000(app)\n",
		},
		{
			name:   "uid:gid without supplementary groups",
			spec:   proto.ProcessSpec{Args: []string{"sh", "-c", "id -u; id -g; id -G"}, User: "1000:50"},
			stdout: "1000\n50\n50\n",
		},
		{
			name:   "unknown numeric uid",
			spec:   proto.ProcessSpec{Args: []string{"sh", "-c", "id -u; id -g; echo $HOME"}, User: "4242"},
			stdout: "4242\n0\n/\n",
		},
		{
			name:   "user:group by names",
			spec:   proto.ProcessSpec{Args: []string{"sh", "-c", "id -u; id -g"}, User: "app:staff"},
			stdout: "1000\n50\n",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, c, fmt.Sprintf("p%d", i), tt.spec)
			if r.stdout != tt.stdout || r.stderr != tt.stderr || r.exit.Code != tt.code {
				t.Errorf("got stdout %q stderr %q exit %d; want %q %q %d", r.stdout, r.stderr, r.exit.Code, tt.stdout, tt.stderr, tt.code)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)
	tests := []struct {
		name string
		spec proto.ProcessSpec
		kind proto.ErrorKind
		msg  string
	}{
		{"unknown user", proto.ProcessSpec{Args: []string{"id"}, User: "nope"}, proto.KindUser, "unable to find user nope: no matching entries in passwd file"},
		{"unknown group", proto.ProcessSpec{Args: []string{"id"}, User: "app:nope"}, proto.KindUser, "unable to find group nope: no matching entries in group file"},
		{"command not in PATH", proto.ProcessSpec{Args: []string{"nope"}}, proto.KindNotFound, `exec: "nope": executable file not found in $PATH`},
		{"absolute path missing", proto.ProcessSpec{Args: []string{"/nope"}}, proto.KindNotFound, `exec: "/nope": stat /nope: no such file or directory`},
		{"not executable", proto.ProcessSpec{Args: []string{"/etc/notexec"}}, proto.KindPermission, `exec: "/etc/notexec": permission denied`},
		{"command not in PATH, with a terminal", proto.ProcessSpec{Args: []string{"nope"}, Terminal: true}, proto.KindNotFound, `exec: "nope": executable file not found in $PATH`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Start(ctx(t), fmt.Sprintf("e%d", i), tt.spec)
			var ae *host.AgentError
			if !errors.As(err, &ae) {
				t.Fatalf("got %v, want an agent error", err)
			}
			if ae.Kind != tt.kind || ae.Message != tt.msg {
				t.Errorf("got %s %q, want %s %q", ae.Kind, ae.Message, tt.kind, tt.msg)
			}
		})
	}
	// A failed start leaves no process behind under that id.
	_, err := c.Process("e0").Wait(ctx(t))
	var ae *host.AgentError
	if !errors.As(err, &ae) || ae.Kind != proto.KindNoProcess {
		t.Errorf("wait on failed start: got %v, want %s", err, proto.KindNoProcess)
	}
}

func TestStdin(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)
	p, err := c.Start(ctx(t), "cat", proto.ProcessSpec{Args: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := p.Stdin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("hello, stdin\n", 10000)
	go func() {
		io.WriteString(in, want)
		in.Close()
	}()
	r := collect(t, p)
	if r.stdout != want || r.exit.Code != 0 {
		t.Errorf("cat: got %d bytes exit %d, want %d bytes exit 0", len(r.stdout), r.exit.Code, len(want))
	}
	// Without Stdin the process reads /dev/null.
	r = run(t, c, "nostdin", proto.ProcessSpec{Args: []string{"cat"}})
	if r.stdout != "" || r.exit.Code != 0 {
		t.Errorf("cat without stdin: got %q exit %d", r.stdout, r.exit.Code)
	}
}

// A plain shell as PID 1 has no SIGTERM handler, so the kernel drops
// SIGTERM; SIGKILL ends it (Docker's exit 137 after docker stop).
func TestPid1IgnoresSIGTERM(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)
	p, err := c.Start(ctx(t), "init", proto.ProcessSpec{Args: []string{"sh", "-c", "echo $$; while :; do sleep 1; done"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Stdout(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 2)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "1\n" {
		t.Fatalf("echo $$: got %q, %v; want \"1\\n\"", line, err)
	}
	if err := p.Signal(ctx(t), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Had SIGTERM been delivered, the kernel would already have fixed the
	// exit as 143 before SIGKILL is sent.
	if err := p.Signal(ctx(t), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exit, err := p.Wait(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != 137 || exit.Signal != 9 {
		t.Errorf("exit %+v, want code 137 signal 9", exit)
	}
	if rest, _ := io.ReadAll(out); len(rest) != 0 {
		t.Errorf("unexpected output %q", rest)
	}
	// Signalling an exited process is not an error.
	if err := p.Signal(ctx(t), syscall.SIGKILL); err != nil {
		t.Errorf("signal after exit: %v", err)
	}
	// The status is kept until forgotten.
	if exit, err := c.Process("init").Wait(ctx(t)); err != nil || exit.Code != 137 {
		t.Errorf("wait by id: %+v %v", exit, err)
	}
	if err := p.Forget(ctx(t)); err != nil {
		t.Fatal(err)
	}
	_, err = c.Process("init").Wait(ctx(t))
	var ae *host.AgentError
	if !errors.As(err, &ae) || ae.Kind != proto.KindNoProcess {
		t.Errorf("wait after forget: %v, want %s", err, proto.KindNoProcess)
	}
}

func TestOutputBeforeAttach(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)
	p, err := c.Start(ctx(t), "early", proto.ProcessSpec{Args: []string{"sh", "-c", "seq 1 30000; echo bye >&2; exit 5"}})
	if err != nil {
		t.Fatal(err)
	}
	// Let it finish before anyone attaches.
	if exit, err := p.Wait(ctx(t)); err != nil || exit.Code != 5 {
		t.Fatalf("wait: %+v %v", exit, err)
	}
	r := collect(t, p)
	if r.stdout != seq(1, 30000) || r.stderr != "bye\n" || r.exit.Code != 5 {
		t.Errorf("got %d bytes stdout, stderr %q, exit %d", len(r.stdout), r.stderr, r.exit.Code)
	}
}

func seq(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// Output produced while no session exists is delivered in full to the next
// one, with the exit status.
func TestReattachAfterSessionChange(t *testing.T) {
	f := newFixture(t)
	c1, end1 := f.connect(t)
	setup(t, c1)
	p, err := c1.Start(ctx(t), "job", proto.ProcessSpec{Args: []string{"sh", "-c", "read x; touch /stdin-read; seq 1 50000; exit 7"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := p.Stdin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	in.Close()
	// Input still in flight when a session ends dies with it; end the
	// session only once the process has read its line.
	for {
		if _, err := os.Stat(filepath.Join(f.root, "stdin-read")); err == nil {
			break
		}
		select {
		case <-ctx(t).Done():
			t.Fatal("the process never read its input")
		case <-time.After(10 * time.Millisecond):
		}
	}
	end1()

	c2, _ := f.connect(t)
	p2 := c2.Process("job")
	r := collect(t, p2)
	if r.stdout != seq(1, 50000) || r.exit.Code != 7 {
		t.Errorf("after reattach: %d bytes (want %d), exit %d (want 7)", len(r.stdout), len(seq(1, 50000)), r.exit.Code)
	}
	if p2.Pid() == 0 {
		t.Error("reattached handle learned no pid")
	}
}

// A session dropped in the middle of output: the new session gets the rest
// and the exit status. At the break itself the transport gives no
// guarantee: bytes the first session had taken but the host had not read
// are lost, and a frame sent just as the session died may be sent again;
// either is bounded by one yamux window.
func TestSessionDropMidOutput(t *testing.T) {
	f := newFixture(t)
	c1, end1 := f.connect(t)
	setup(t, c1)
	p, err := c1.Start(ctx(t), "stream", proto.ProcessSpec{Args: []string{"sh", "-c", "seq 1 200000; exit 9"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Stdout(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 100000)
	if _, err := io.ReadFull(out, first); err != nil {
		t.Fatal(err)
	}
	end1()

	c2, _ := f.connect(t)
	r := collect(t, c2.Process("stream"))
	full := seq(1, 200000)
	const window = 256 << 10
	switch {
	case !strings.HasPrefix(full, string(first)):
		t.Error("first session's output is not the start of the sequence")
	case !strings.HasSuffix(full, r.stdout):
		t.Error("second session's output is not the end of the sequence")
	case len(first)+len(r.stdout) < len(full)-window || len(first)+len(r.stdout) > len(full)+window:
		t.Errorf("lost %d bytes across the session change, more than one window", len(full)-len(first)-len(r.stdout))
	case len(r.stdout) == 0:
		t.Error("no output in the second session")
	}
	t.Logf("first session read %d bytes, second %d, lost %d", len(first), len(r.stdout), len(full)-len(first)-len(r.stdout))
	if r.exit.Code != 9 {
		t.Errorf("exit %d, want 9", r.exit.Code)
	}
}

// With acknowledgements nothing is lost or repeated across a host that
// dies after reading output but before storing it: the next attachment is
// sent again exactly what was never acknowledged.
func TestSessionDropMidAckedOutput(t *testing.T) {
	f := newFixture(t)
	c1, end1 := f.connect(t)
	setup(t, c1)
	p, err := c1.Start(ctx(t), "stream", proto.ProcessSpec{Args: []string{"sh", "-c", "seq 1 200000; exit 9"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.AckedStdout(ctx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 100000)
	if _, err := io.ReadFull(out, first); err != nil {
		t.Fatal(err)
	}
	const stored = 60000
	if err := out.Ack(stored); err != nil {
		t.Fatal(err)
	}
	// Over the synchronous in-memory pipe a write returns once the agent's
	// session has read it, so after a second (repeated) acknowledgement the
	// first is in the agent's stream buffer, which it drains before the
	// session ends: the test knows what the agent kept.
	if err := out.Ack(stored); err != nil {
		t.Fatal(err)
	}
	end1()

	c2, _ := f.connect(t)
	p2 := c2.Process("stream")
	out2, err := p2.AckedStdout(ctx(t), true)
	if err != nil {
		t.Fatal(err)
	}
	var rest bytes.Buffer
	buf := make([]byte, 32<<10)
	for {
		n, err := out2.Read(buf)
		rest.Write(buf[:n])
		if n > 0 {
			if err := out2.Ack(int64(rest.Len())); err != nil {
				t.Fatal(err)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	out2.Close()
	full := seq(1, 200000)
	if got := string(first[:stored]) + rest.String(); got != full {
		t.Errorf("stored %d bytes then got %d more; want the %d bytes of the sequence exactly (first differing at %d)",
			stored, rest.Len(), len(full), firstDiff(got, full))
	}
	exit, err := p2.Wait(ctx(t))
	if err != nil || exit.Code != 9 {
		t.Errorf("exit %+v, %v; want 9", exit, err)
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// listener hands out in-memory connections, one per session.
type listener chan io.ReadWriteCloser

func (l listener) Accept(ctx context.Context) (io.ReadWriteCloser, error) {
	select {
	case c := <-l:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestServeRunsSessionsInTurn(t *testing.T) {
	f := newFixture(t)
	l := make(listener)
	sctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.agent.Serve(sctx, l) }()
	defer func() {
		cancel()
		if err := <-served; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve returned %v, want context.Canceled", err)
		}
	}()

	session := func() *host.Client {
		h, a := net.Pipe()
		l <- a
		c, err := host.New(h)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1 := session()
	info, err := c1.Ping(ctx(t))
	if err != nil || info.Kernel == "" {
		t.Fatalf("ping: %+v %v", info, err)
	}
	setup(t, c1)
	p, err := c1.Start(ctx(t), "s", proto.ProcessSpec{Args: []string{"sh", "-c", "read x; echo $x"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()

	c2 := session()
	defer c2.Close()
	// Setup again (a restarted daemon does) must be accepted.
	setup(t, c2)
	in, err := c2.Process("s").Stdin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(in, "second\n")
	in.Close()
	r := collect(t, c2.Process("s"))
	if r.stdout != "second\n" || r.exit.Code != 0 || p.Pid() == 0 {
		t.Errorf("got %q exit %d", r.stdout, r.exit.Code)
	}
}

func TestEtcFiles(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky", ResolvConf: "nameserver 10.0.2.3\n"}); err != nil {
		t.Fatal(err)
	}
	r := run(t, c, "etc", proto.ProcessSpec{Args: []string{"sh", "-c", "cat /etc/hostname /etc/resolv.conf; grep -c husky /etc/hosts"}})
	if want := "husky\nnameserver 10.0.2.3\n1\n"; r.stdout != want {
		t.Errorf("got %q, want %q (stderr %q)", r.stdout, want, r.stderr)
	}
	// The bind mounts were private to the container: the root directory
	// holds only empty mount-point files.
	b, err := os.ReadFile(filepath.Join(f.root, "etc/hostname"))
	if err != nil || len(b) != 0 {
		t.Errorf("etc/hostname in the root: %q %v, want an empty file", b, err)
	}
}

func TestExecInRunningContainer(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)
	main, err := c.Start(ctx(t), "main", proto.ProcessSpec{Args: []string{"sh", "-c", "echo ready; read x"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := main.Stdout(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil {
		t.Fatal(err)
	}
	// Sees the main process as pid 1 and its hostname.
	r := run(t, c, "exec", proto.ProcessSpec{Args: []string{"sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '; hostname; [ $$ != 1 ] && echo notone"}, ExecOf: "main"})
	if want := "sh -c echo ready; read x husky\nnotone\n"; r.stdout != want {
		t.Errorf("exec: got %q, want %q (stderr %q)", r.stdout, want, r.stderr)
	}
	in, err := main.Stdin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	// read fails at EOF, so the shell exits 1.
	if exit, err := main.Wait(ctx(t)); err != nil || exit.Code != 1 {
		t.Errorf("main: %+v %v", exit, err)
	}
}

// A session whose host vanishes must end even while output attachments wait
// for output that never comes (an idle stderr): otherwise the agent never
// serves the next session, and a restarted daemon cannot reattach.
func TestSessionWithIdleAttachmentsEnds(t *testing.T) {
	f := newFixture(t)
	hostEnd, agentEnd := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- f.agent.ServeConn(context.Background(), agentEnd) }()
	c, err := host.New(hostEnd)
	if err != nil {
		t.Fatal(err)
	}
	setup(t, c)
	p, err := c.Start(ctx(t), "idle", proto.ProcessSpec{Args: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, attach := range []func(context.Context) (io.ReadCloser, error){p.Stdout, p.Stderr} {
		if _, err := attach(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	// The host dies: its end of the channel goes away without a goodbye.
	hostEnd.Close()
	select {
	case <-done:
	case <-ctx(t).Done():
		t.Fatal("the session never ended after its host went away")
	}
	c2, end := f.connect(t)
	defer end()
	if err := c2.Process("idle").Signal(ctx(t), syscall.SIGKILL); err != nil {
		t.Fatalf("signal through a new session: %v", err)
	}
	if st, err := c2.Process("idle").Wait(ctx(t)); err != nil || st.Code != 137 {
		t.Fatalf("wait through a new session: %+v, %v", st, err)
	}
}

// blockingRootfs is a Rootfs whose mount waits for release.
type blockingRootfs struct {
	dir      string
	entered  chan struct{}
	released chan struct{}
}

func (b blockingRootfs) Mount(context.Context, proto.SetupSpec) (string, error) {
	close(b.entered)
	<-b.released
	return b.dir, nil
}
func (blockingRootfs) Unmount(context.Context) error { return nil }

// TestNextSessionDoesNotWaitForRequests: a host that goes away while a
// request of its session still runs (a restore's stale session, a daemon
// restart mid-setup) does not hold the next host's session back.
func TestNextSessionDoesNotWaitForRequests(t *testing.T) {
	rootfs := blockingRootfs{dir: makeRoot(t), entered: make(chan struct{}), released: make(chan struct{})}
	a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: rootfs, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	l := make(listener)
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Serve(sctx, l)
	session := func() (*host.Client, net.Conn) {
		h, ag := net.Pipe()
		l <- ag
		c, err := host.New(h)
		if err != nil {
			t.Fatal(err)
		}
		return c, h
	}

	c1, h1 := session()
	setupDone := make(chan error, 1)
	go func() { setupDone <- c1.Setup(ctx(t), proto.SetupSpec{Hostname: "husky"}) }()
	<-rootfs.entered
	h1.Close()
	if err := <-setupDone; err == nil {
		t.Error("setup answered through a session its host closed")
	}

	c2, _ := session()
	defer c2.Close()
	if _, err := c2.Ping(ctx(t)); err != nil {
		t.Fatalf("ping in the next session while the previous one's setup runs: %v", err)
	}
	close(rootfs.released)
	// The setup the first host asked for completed; the second host's
	// setup is accepted as done.
	if err := c2.Setup(ctx(t), proto.SetupSpec{Hostname: "husky"}); err != nil {
		t.Fatalf("setup in the next session: %v", err)
	}
}

// failingRootfs is a Rootfs whose mount fails.
type failingRootfs struct{}

func (failingRootfs) Mount(context.Context, proto.SetupSpec) (string, error) {
	return "", errors.New("no such disk")
}
func (failingRootfs) Unmount(context.Context) error { return nil }

// TestAwaitSetup sends a start with AwaitSetup before its setup, as the
// host does: the agent holds it until the setup ends, then runs it; a
// failed setup fails it; and a session that ends first releases it.
func TestAwaitSetup(t *testing.T) {
	spec := proto.ProcessSpec{Args: []string{"echo", "after setup"}, AwaitSetup: true}
	t.Run("held until the setup", func(t *testing.T) {
		f := newFixture(t)
		c, _ := f.connect(t)
		type started struct {
			p   *host.Process
			err error
		}
		done := make(chan started, 1)
		go func() {
			p, err := c.Start(ctx(t), "main", spec)
			done <- started{p, err}
		}()
		select {
		case s := <-done:
			t.Fatalf("start answered before any setup: %+v", s)
		case <-time.After(200 * time.Millisecond):
		}
		setup(t, c)
		s := <-done
		if s.err != nil {
			t.Fatalf("start after setup: %v", s.err)
		}
		if r := collect(t, s.p); r.stdout != "after setup\n" || r.exit.Code != 0 {
			t.Errorf("process: %+v", r)
		}
	})
	t.Run("failed setup", func(t *testing.T) {
		a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: failingRootfs{}, StateDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		c, _ := (&fixture{agent: a}).connect(t)
		done := make(chan error, 1)
		go func() {
			_, err := c.Start(ctx(t), "main", spec)
			done <- err
		}()
		if err := c.Setup(ctx(t), proto.SetupSpec{}); err == nil {
			t.Fatal("setup on a failing root succeeded")
		}
		err = <-done
		var ae *host.AgentError
		if !errors.As(err, &ae) || !strings.Contains(ae.Message, "not set up: setup: no such disk") {
			t.Errorf("start after a failed setup: %v", err)
		}
	})
	t.Run("session ends first", func(t *testing.T) {
		f := newFixture(t)
		c, end := f.connect(t)
		done := make(chan error, 1)
		go func() {
			_, err := c.Start(ctx(t), "main", spec)
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		end() // returns only once the agent has let the session go
		if err := <-done; err == nil {
			t.Error("start succeeded without a setup")
		}
	})
}

// recordingRootfs is a Rootfs that records the disks of each mount.
type recordingRootfs struct {
	dir    string
	mu     sync.Mutex
	mounts []proto.SetupSpec
}

func (r *recordingRootfs) Mount(_ context.Context, spec proto.SetupSpec) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mounts = append(r.mounts, spec)
	return r.dir, nil
}
func (*recordingRootfs) Unmount(context.Context) error { return nil }

// TestMountRoot: OpMountRoot mounts the root of the disks it names, and
// is refused without serials or once the guest is set up.
func TestMountRoot(t *testing.T) {
	rootfs := &recordingRootfs{dir: makeRoot(t)}
	a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: rootfs, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	c, _ := (&fixture{agent: a, root: rootfs.dir}).connect(t)

	if err := c.MountRoot(ctx(t), proto.MountRootSpec{BaseSerial: "b"}); err == nil {
		t.Error("mount-root without an upper serial succeeded")
	}
	if err := c.MountRoot(ctx(t), proto.MountRootSpec{BaseSerial: "b", UpperSerial: "u"}); err != nil {
		t.Fatal(err)
	}
	if len(rootfs.mounts) != 1 || rootfs.mounts[0].BaseSerial != "b" || rootfs.mounts[0].UpperSerial != "u" || rootfs.mounts[0].Hostname != "" {
		t.Fatalf("mounts %+v, want one of disks b and u without a hostname", rootfs.mounts)
	}
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky", BaseSerial: "b", UpperSerial: "u"}); err != nil {
		t.Fatal(err)
	}
	if err := c.MountRoot(ctx(t), proto.MountRootSpec{BaseSerial: "b", UpperSerial: "u"}); err == nil {
		t.Error("mount-root after the setup succeeded")
	}
	if len(rootfs.mounts) != 2 {
		t.Errorf("mounts %+v, want the mount-root's and the setup's", rootfs.mounts)
	}
}

// TestStartWaitsForNetwork: a main process started while the setup's
// network is still being configured runs only once it is (its program
// sees what the network setup did); a network that fails fails the
// setup and the start, and takes the root back.
func TestStartWaitsForNetwork(t *testing.T) {
	spec := proto.ProcessSpec{Args: []string{"cat", "/network"}, AwaitSetup: true}
	newAgent := func(t *testing.T, network func(root string) error) *host.Client {
		root := makeRoot(t)
		a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(root), StateDir: t.TempDir(),
			Network: func(context.Context, *proto.NetworkSpec) error { return network(root) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		c, _ := (&fixture{agent: a, root: root}).connect(t)
		return c
	}
	type started struct {
		p   *host.Process
		err error
	}
	t.Run("held until the network is up", func(t *testing.T) {
		release := make(chan struct{})
		c := newAgent(t, func(root string) error {
			<-release
			return os.WriteFile(filepath.Join(root, "network"), []byte("configured\n"), 0o644)
		})
		setupDone, startDone := make(chan error, 1), make(chan started, 1)
		go func() {
			p, err := c.Start(ctx(t), "main", spec)
			startDone <- started{p, err}
		}()
		go func() {
			setupDone <- c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky", Network: &proto.NetworkSpec{}})
		}()
		select {
		case err := <-setupDone:
			t.Fatalf("setup answered before its network: %v", err)
		case s := <-startDone:
			t.Fatalf("start answered before the network: %+v", s)
		case <-time.After(300 * time.Millisecond):
		}
		close(release)
		if err := <-setupDone; err != nil {
			t.Fatalf("setup: %v", err)
		}
		s := <-startDone
		if s.err != nil {
			t.Fatalf("start: %v", s.err)
		}
		if r := collect(t, s.p); r.stdout != "configured\n" || r.exit.Code != 0 {
			t.Errorf("the program ran before the network was set up: %+v", r)
		}
	})
	t.Run("network fails", func(t *testing.T) {
		c := newAgent(t, func(string) error {
			time.Sleep(200 * time.Millisecond)
			return errors.New("no such link")
		})
		startDone := make(chan started, 1)
		go func() {
			p, err := c.Start(ctx(t), "main", spec)
			startDone <- started{p, err}
		}()
		if err := c.Setup(ctx(t), proto.SetupSpec{Network: &proto.NetworkSpec{}}); err == nil || !strings.Contains(err.Error(), "network: no such link") {
			t.Fatalf("setup with a failing network: %v", err)
		}
		if s := <-startDone; s.err == nil {
			t.Fatalf("start with a failed network succeeded: %+v", collect(t, s.p))
		}
		if _, err := c.Start(ctx(t), "again", proto.ProcessSpec{Args: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "not set up") {
			t.Errorf("start after the failed setup: %v, want the root not set up", err)
		}
	})
}
