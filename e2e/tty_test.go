package e2e

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/husk-vm/husk/e2e/testimages"
)

// ptyDocker is a docker CLI whose stdin, stdout and stderr are a terminal
// the test holds the other side of, as when a user types.
type ptyDocker struct {
	t      *testing.T
	args   string
	cmd    *exec.Cmd
	master *os.File
	cancel context.CancelFunc
	exited chan struct{}

	mu     sync.Mutex
	out    []byte
	seen   int // output before this offset has been matched already
	readOK chan struct{}
}

// startPTY runs the docker CLI on a new terminal of rows x cols.
func startPTY(t *testing.T, rows, cols uint16, args ...string) *ptyDocker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	cmd := exec.CommandContext(ctx, suite.DockerCLI, args...)
	cmd.Env = append(dockerEnv(), "TERM=xterm")
	master, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		cancel()
		t.Fatalf("start docker %s on a terminal: %v", strings.Join(args, " "), err)
	}
	p := &ptyDocker{t: t, args: strings.Join(args, " "), cmd: cmd, master: master, cancel: cancel,
		exited: make(chan struct{}), readOK: make(chan struct{}, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			p.mu.Lock()
			p.out = append(p.out, buf[:n]...)
			p.mu.Unlock()
			select {
			case p.readOK <- struct{}{}:
			default:
			}
			if err != nil {
				close(p.exited)
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		master.Close()
		_ = cmd.Wait()
	})
	return p
}

// expect waits until output not matched before contains want.
func (p *ptyDocker) expect(want string) {
	p.t.Helper()
	deadline := time.NewTimer(commandTimeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		i := strings.Index(string(p.out[p.seen:]), want)
		if i >= 0 {
			p.seen += i + len(want)
		}
		out := string(p.out)
		p.mu.Unlock()
		if i >= 0 {
			return
		}
		select {
		case <-p.readOK:
		case <-p.exited:
			p.mu.Lock()
			done := !strings.Contains(string(p.out[p.seen:]), want)
			p.mu.Unlock()
			if done {
				p.t.Fatalf("docker %s: output ended without %q; all output: %q", p.args, want, out)
			}
		case <-deadline.C:
			p.t.Fatalf("docker %s: no %q within %v; all output: %q", p.args, want, commandTimeout, out)
		}
	}
}

// send types s.
func (p *ptyDocker) send(s string) {
	p.t.Helper()
	if _, err := io.WriteString(p.master, s); err != nil {
		p.t.Fatalf("type into docker %s: %v", p.args, err)
	}
}

// wait returns the CLI's exit code and everything it printed.
func (p *ptyDocker) wait() (int, string) {
	p.t.Helper()
	err := p.cmd.Wait()
	select {
	case <-p.exited:
	case <-time.After(commandTimeout):
		p.t.Fatalf("docker %s: the terminal never closed", p.args)
	}
	p.mu.Lock()
	out := string(p.out)
	p.mu.Unlock()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		p.t.Logf("$ docker %s (on a terminal)\n  exit %d, output %q", p.args, exit.ExitCode(), clip(out))
		return exit.ExitCode(), out
	case err != nil:
		p.t.Fatalf("docker %s: %v", p.args, err)
	}
	p.t.Logf("$ docker %s (on a terminal)\n  exit 0, output %q", p.args, clip(out))
	return 0, out
}

func TestRunInteractiveTTY(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)

	// A shell on a terminal of the CLI's size, which follows the CLI's
	// terminal when it is resized, and whose exit code comes back.
	p := startPTY(t, 24, 80, "run", "-it", "--rm", img, "sh")
	p.expect("# ")
	p.send("tty; stty size; echo $TERM\r")
	p.expect("/dev/pts/0\r\n24 80\r\nxterm\r\n")
	if err := pty.Setsize(p.master, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	// The resize travels CLI → daemon → guest while the shell waits for it.
	p.send(`until [ "$(stty size)" = "30 100" ]; do sleep 0.1; done; echo resized-$((6*7))` + "\r")
	p.expect("resized-42\r\n")
	p.send("exit 3\r")
	if code, _ := p.wait(); code != 3 {
		t.Errorf("docker run -it ... sh; exit 3: exit code %d, want 3", code)
	}

	// Ctrl-D at the prompt ends the shell: the byte goes through the
	// terminal, not as the end of a stream.
	p = startPTY(t, 24, 80, "run", "-it", "--rm", img, "sh")
	p.expect("# ")
	p.send("\x04")
	if code, _ := p.wait(); code != 0 {
		t.Errorf("Ctrl-D: exit code %d, want 0", code)
	}
}

func TestTTYWithoutStdin(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	// -t alone: output is the terminal's, with its \r\n, and so are the
	// logs, with stdout and stderr merged.
	r := docker(t, "run", "-t", "--name", name, img, "sh", "-c", "tty; echo err >&2; exit 2")
	if want := (result{Stdout: "/dev/pts/0\r\nerr\r\n", Code: 2}); r != want {
		t.Errorf("run -t = %+v, want %+v", r, want)
	}
	if r := docker(t, "logs", name); r != (result{Stdout: "/dev/pts/0\r\nerr\r\n"}) {
		t.Errorf("logs of a TTY container = %+v", r)
	}
	mustDocker(t, "rm", name)
}

func TestDetachAndAttach(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")

	p := startPTY(t, 24, 80, "run", "-it", "--name", name, img, "sh")
	p.expect("# ")
	p.send("echo one-$((1+1))\r")
	p.expect("one-2\r\n")
	// ctrl-p ctrl-q leaves the container running.
	p.send("\x10\x11")
	code, _ := p.wait()
	if code != 0 {
		t.Errorf("detach: exit code %d, want 0", code)
	}
	if got := mustDocker(t, "inspect", "-f", "{{.State.Running}}", name); got != "true\n" {
		t.Fatalf("after detach, running = %q", got)
	}

	p = startPTY(t, 24, 80, "attach", name)
	p.send("echo two-$((1+1))\r")
	p.expect("two-2\r\n")
	p.send("exit 5\r")
	if code, _ := p.wait(); code != 5 {
		t.Errorf("attach, then exit 5: exit code %d, want 5", code)
	}
	logs := mustDocker(t, "logs", name)
	if !strings.Contains(logs, "one-2\r\n") || !strings.Contains(logs, "two-2\r\n") {
		t.Errorf("logs = %q, want both sessions' output", logs)
	}
	mustDocker(t, "rm", name)
}

func TestAttachWithoutTTY(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "-i", "--name", name, img, "sh", "-c", "read x; echo got $x; echo err >&2; exit 4")

	// stdin stays open until the CLI is done: its end would end the
	// attachment early.
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inW.Close()
	if _, err := io.WriteString(inW, "hello\n"); err != nil {
		t.Fatal(err)
	}
	r := dockerStdin(t, inR, "attach", name)
	inR.Close()
	if want := (result{Stdout: "got hello\n", Stderr: "err\n", Code: 4}); r != want {
		t.Errorf("attach = %+v, want %+v", r, want)
	}
	mustDocker(t, "rm", name)
}
