//go:build linux

package agent_test

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

// readUntil reads r until the text read so far contains want, and returns
// it; it fails t if the stream ends first.
func readUntil(t *testing.T, r *bufio.Reader, want string) string {
	t.Helper()
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("stream ended (%v) before %q; got %q", err, want, got.String())
		}
		got.WriteByte(b)
	}
	return got.String()
}

func TestTerminal(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)

	// The terminal lives in the container's own devpts, is the controlling
	// terminal, has the requested size, and carries stderr too.
	r := run(t, c, "tty", proto.ProcessSpec{
		Args:     []string{"sh", "-c", "tty; stty size; echo err >&2; [ -t 0 ] && echo stdin-is-tty; ls -1 /dev/pts"},
		Terminal: true, ConsoleSize: &proto.WindowSize{Rows: 30, Cols: 100},
	})
	want := "/dev/pts/0\r\n30 100\r\nerr\r\nstdin-is-tty\r\n0\r\nptmx\r\n"
	if r.stdout != want || r.stderr != "" || r.exit.Code != 0 {
		t.Errorf("got stdout %q stderr %q exit %+v, want stdout %q", r.stdout, r.stderr, r.exit, want)
	}

	// Input is echoed by the terminal, resize reaches the process, and
	// ^D at an empty prompt ends the shell.
	p, err := c.Start(ctx(t), "shell", proto.ProcessSpec{Args: []string{"sh"}, Terminal: true, Stdin: true,
		Env: []string{"PS1=$ "}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Stdout(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	in, err := p.Stdin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(out)
	readUntil(t, br, "$ ")
	if err := p.Resize(ctx(t), 40, 120); err != nil {
		t.Fatalf("resize: %v", err)
	}
	io.WriteString(in, "stty size\n")
	readUntil(t, br, "40 120\r\n")
	io.WriteString(in, "exit 7\n")
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Errorf("read to the end: %v", err)
	}
	if exit, err := p.Wait(ctx(t)); err != nil || exit.Code != 7 {
		t.Errorf("wait = %+v, %v; want exit 7", exit, err)
	}

	// A process without a terminal cannot be resized.
	q, err := c.Start(ctx(t), "plain", proto.ProcessSpec{Args: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Resize(ctx(t), 1, 1); err == nil || !strings.Contains(err.Error(), "has no terminal") {
		t.Errorf("resize without a terminal: %v", err)
	}
}

func TestExecWithTerminal(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)
	main, err := c.Start(ctx(t), "main", proto.ProcessSpec{Args: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer main.Signal(ctx(t), 9)
	r := run(t, c, "exec", proto.ProcessSpec{Args: []string{"sh", "-c", "tty; stty size"}, Terminal: true,
		ConsoleSize: &proto.WindowSize{Rows: 5, Cols: 6}, ExecOf: "main"})
	if want := "/dev/pts/0\r\n5 6\r\n"; r.stdout != want {
		t.Errorf("exec with a terminal: got %q, want %q", r.stdout, want)
	}
}

// Forgetting a process whose stdin attachment is still open (a terminal
// session whose host side never closed its input) must not wedge the agent.
func TestForgetWithOpenStdin(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)
	p, err := c.Start(ctx(t), "p", proto.ProcessSpec{Args: []string{"sh", "-c", "exit 0"}, Stdin: true, Terminal: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := p.Stdin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if r := collect(t, p); r.exit.Code != 0 {
		t.Fatalf("exit %+v", r.exit)
	}
	if err := p.Forget(ctx(t)); err != nil {
		t.Fatalf("forget: %v", err)
	}
	if r := run(t, c, "q", proto.ProcessSpec{Args: []string{"echo", "alive"}}); r.stdout != "alive\n" {
		t.Errorf("after forget: %+v", r)
	}
}
