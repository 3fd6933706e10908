//go:build linux

package agent_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

// An exec joins the main process's namespaces, the mount namespace above
// all: it sees the /dev/shm the main process got (and what it wrote there),
// the same mount table, and what it writes there the main process sees.
func TestExecJoinsMountNamespace(t *testing.T) {
	f := newFixture(t)
	for _, applet := range []string{"readlink", "cmp"} {
		if err := os.Symlink("busybox", filepath.Join(f.root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := f.connect(t)
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky", Settings: &proto.ContainerSettings{ShmSize: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	main, err := c.Start(ctx(t), "main", proto.ProcessSpec{
		Args:  []string{"sh", "-c", "echo main > /dev/shm/m; echo ready; read x; cat /dev/shm/e"},
		Stdin: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := main.Stdout(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(out, line); err != nil {
		t.Fatal(err)
	}

	script := `cat /dev/shm/m; echo exec > /dev/shm/e; grep -c ' /dev/shm tmpfs .*size=1024k' /proc/self/mounts; ` +
		`for n in ipc mnt net pid uts; do [ "$(readlink /proc/1/ns/$n)" = "$(readlink /proc/self/ns/$n)" ] && echo $n same || echo $n differs; done; ` +
		`cmp /proc/1/mounts /proc/self/mounts && echo same mounts`
	for _, terminal := range []bool{false, true} {
		r := run(t, c, fmt.Sprintf("exec-%v", terminal), proto.ProcessSpec{Args: []string{"sh", "-c", script}, ExecOf: "main", Terminal: terminal})
		want := "main\n1\nipc same\nmnt same\nnet same\npid same\nuts same\nsame mounts\n"
		if terminal {
			want = "main\r\n1\r\nipc same\r\nmnt same\r\nnet same\r\npid same\r\nuts same\r\nsame mounts\r\n"
		}
		if r.stdout != want || r.exit.Code != 0 {
			t.Errorf("exec (terminal %v): exit %d, stdout %q, want %q (stderr %q)", terminal, r.exit.Code, r.stdout, want, r.stderr)
		}
	}
	// The agent's own view is untouched: /dev and what is under it are
	// the container's alone.
	if _, err := os.Lstat(filepath.Join(f.root, "dev/shm/e")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dev/shm/e in the agent's view of the root: %v, want it absent", err)
	}

	in, err := main.Stdin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	rest, err := io.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(rest) != "exec\n" {
		t.Errorf("main process read %q from the file the exec wrote, want %q", rest, "exec\n")
	}
	if exit, err := main.Wait(ctx(t)); err != nil || exit.Code != 0 {
		t.Errorf("main: %+v %v", exit, err)
	}
}
