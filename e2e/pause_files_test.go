package e2e

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPausedContainerServesItsFiles: a paused container's processes are
// listed and its files copied out and in, diffed, exported and committed,
// as under dockerd, whose pause only freezes the processes; exec stays
// refused. It runs against the reference dockerd too when the supervisor
// has one.
func TestPausedContainerServesItsFiles(t *testing.T) {
	requireSuite(t)
	onEachDaemon(t, func(t *testing.T, d daemonAt, img string) {
		name := nameAt(t, d, "")
		tag := name + ":committed"
		t.Cleanup(func() {
			cliAt(t, d.host, nil, "rm", "-f", name)
			cliAt(t, d.host, nil, "rmi", tag)
		})
		mustCLIAt(t, d, "run", "-d", "--name", name, img, "sh", "-c", "echo made > /made; exec sleep 1000")
		eventually(t, "the container wrote /made", func() string {
			if r := cliAt(t, d.host, nil, "exec", name, "cat", "/made"); r.Code != 0 || r.Stdout != "made\n" {
				return r.Stdout + r.Stderr
			}
			return ""
		})
		mustCLIAt(t, d, "pause", name)

		if top := mustCLIAt(t, d, "top", name); !strings.Contains(top, "sleep 1000") {
			t.Errorf("top of the paused container:\n%s\nwant its sleep 1000", top)
		}
		if diff := mustCLIAt(t, d, "diff", name); !strings.Contains(diff, "A /made") {
			t.Errorf("diff of the paused container:\n%s\nwant A /made", diff)
		}
		dir := t.TempDir()
		mustCLIAt(t, d, "cp", name+":/made", dir)
		if b, err := os.ReadFile(filepath.Join(dir, "made")); err != nil || string(b) != "made\n" {
			t.Errorf("cp out of the paused container gave %q, %v; want \"made\\n\"", b, err)
		}
		put := filepath.Join(dir, "put")
		if err := os.WriteFile(put, []byte("put\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		mustCLIAt(t, d, "cp", put, name+":/put")
		exported := filepath.Join(dir, "export.tar")
		mustCLIAt(t, d, "export", "-o", exported, name)
		if got := tarFile(t, exported, "made"); got != "made\n" {
			t.Errorf("export of the paused container has made = %q, want \"made\\n\"", got)
		}
		mustCLIAt(t, d, "commit", name, tag)
		if r := cliAt(t, d.host, nil, "exec", name, "true"); r.Code == 0 || !strings.Contains(r.Stderr, "is paused") {
			t.Errorf("exec in the paused container: exit %d, %q; want refused as paused", r.Code, r.Stderr)
		}
		if got := mustCLIAt(t, d, "inspect", "-f", "{{.State.Status}}", name); got != "paused" {
			t.Errorf("after all that the container is %q, want still paused", got)
		}

		mustCLIAt(t, d, "unpause", name)
		if got := mustCLIAt(t, d, "exec", name, "cat", "/put"); got != "put" {
			t.Errorf("the file copied in while paused reads %q, want put", got)
		}
		if got := mustCLIAt(t, d, "run", "--rm", tag, "cat", "/made", "/put"); got != "made\nput" {
			t.Errorf("the image committed while paused has %q, want made and put", got)
		}
	})
}

// tarFile is the content of the entry called name (without a leading
// "./" or "/") in the tar at path, or "" if it has none.
func tarFile(t *testing.T, path, name string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		if strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/") == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("read %s in %s: %v", name, path, err)
			}
			return string(b)
		}
	}
}
