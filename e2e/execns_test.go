package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// TestExecNamespaces: an exec and a health probe see what the main process
// sees, as under runc, which joins every namespace of the container: its
// /dev/shm (size and contents), a --tmpfs and a bind mount with what the
// main process wrote there, the same mount table, the hostname of -h and
// the same namespaces, and its read-only root.
func TestExecNamespaces(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	bind := t.TempDir()
	if err := os.Chmod(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	name := containerName(t, "")
	main := `echo main > /scratch/f; echo shm > /dev/shm/s; echo bound > /data/d; touch /tmp/ready; exec sleep 1000`
	probe := `test "$(cat /dev/shm/s /scratch/f)" = "$(printf 'shm\nmain')" && test "$(hostname)" = exechost`
	mustDocker(t, "run", "-d", "--name", name, "-h", "exechost", "--shm-size", "128m", "--tmpfs", "/scratch",
		"-v", bind+":/data", "--health-cmd", probe, "--health-interval", "1s", img, "sh", "-c", main)
	eventually(t, "the main process wrote its files", func() string {
		if r := docker(t, "exec", name, "test", "-f", "/tmp/ready"); r.Code != 0 {
			return "not yet"
		}
		return ""
	})

	script := `df /dev/shm | tail -1; cat /dev/shm/s /scratch/f /data/d; hostname; cat /etc/hostname; ` +
		`for n in cgroup ipc mnt net pid uts; do [ "$(readlink /proc/1/ns/$n)" = "$(readlink /proc/self/ns/$n)" ] && echo $n same || echo $n differs; done; ` +
		`cmp /proc/1/mounts /proc/self/mounts && echo same mounts; grep -c ' /scratch tmpfs ' /proc/self/mounts`
	want := "shm 131072 4 131068 0% /dev/shm\nshm\nmain\nbound\nexechost\nexechost\n" +
		"cgroup same\nipc same\nmnt same\nnet same\npid same\nuts same\nsame mounts\n1\n"
	if r := docker(t, "exec", name, "sh", "-c", script); r.Code != 0 || collapseSpaces(r.Stdout) != want || r.Stderr != "" {
		t.Errorf("exec sees: exit %d\nstdout %q\nwant   %q\nstderr %q", r.Code, collapseSpaces(r.Stdout), want, r.Stderr)
	}
	// A TTY exec goes the same way.
	if r := docker(t, "exec", "-t", name, "cat", "/dev/shm/s"); r != (result{Stdout: "shm\r\n"}) {
		t.Errorf("exec -t cat /dev/shm/s = %+v", r)
	}
	// A file an exec writes into /dev/shm is the main process's too.
	mustDocker(t, "exec", name, "sh", "-c", "echo exec > /dev/shm/e")
	if r := docker(t, "exec", name, "sh", "-c", "cat /proc/1/root/dev/shm/e"); r != (result{Stdout: "exec\n"}) {
		t.Errorf("the main process's /dev/shm after an exec wrote there: %+v", r)
	}

	// Health probes are execs.
	awaitHealth(t, name, "becomes healthy", func(h *health) bool { return h.Status == "healthy" })

	// docker cp is not an exec: like dockerd it works on the root
	// filesystem and the volumes and bind mounts, and does not see the
	// tmpfs mounts (--tmpfs, /dev/shm) of the container's mount namespace.
	// A copy into a tmpfs lands underneath, out of the container's sight.
	out := t.TempDir()
	if r := docker(t, "cp", name+":/data/d", filepath.Join(out, "d")); r != (result{}) {
		t.Errorf("cp from the bind mount = %+v", r)
	} else if b, err := os.ReadFile(filepath.Join(out, "d")); err != nil || string(b) != "bound\n" {
		t.Errorf("copied from the bind mount: %q %v", b, err)
	}
	for _, p := range []string{"/scratch/f", "/dev/shm/s"} {
		want := result{Code: 1, Stderr: "Error response from daemon: Could not find the file " + p + " in container " + name + "\n"}
		if r := docker(t, "cp", name+":"+p, filepath.Join(out, "x")); r != want {
			t.Errorf("cp %s = %+v, want %+v", p, r, want)
		}
	}
	if err := os.WriteFile(filepath.Join(out, "in"), []byte("copied\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := docker(t, "cp", filepath.Join(out, "in"), name+":/scratch/in"); r != (result{}) {
		t.Errorf("cp into the tmpfs = %+v", r)
	}
	if r := docker(t, "exec", name, "ls", "/scratch"); r != (result{Stdout: "f\n"}) {
		t.Errorf("the tmpfs after a cp into it: %+v, want only f", r)
	}
	if r := docker(t, "cp", name+":/scratch/in", "-"); r.Code != 0 || !strings.Contains(r.Stdout, "copied\n") {
		t.Errorf("cp of what was copied under the tmpfs: exit %d, stderr %q", r.Code, r.Stderr)
	}
	mustDocker(t, "rm", "-f", name)

	// The exec is held to the main process's read-only root too.
	ro := containerName(t, "-ro")
	mustDocker(t, "run", "-d", "--name", ro, "--read-only", img, "sleep", "1000")
	want = "touch: /x: Read-only file system\n"
	if r := docker(t, "exec", ro, "touch", "/x"); r != (result{Code: 1, Stderr: want}) {
		t.Errorf("exec touch /x in a --read-only container = %+v, want exit 1 and %q", r, want)
	}
	mustDocker(t, "rm", "-f", ro)
}
