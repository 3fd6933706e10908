package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

func TestCopy(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c",
		"mkdir -p /data/sub; echo hello > /data/f; ln -s /data /lnk; touch /ready; sleep 1000")
	eventually(t, "the container prepared its files", func() string {
		if r := docker(t, "exec", name, "test", "-e", "/ready"); r.Code != 0 {
			return "not yet"
		}
		return ""
	})

	// The stat header: a symlink is reported as one, with its target.
	var st struct {
		Name       string
		Size       int64
		Mode       uint32
		LinkTarget string
	}
	r := api(t, "HEAD", "/containers/"+name+"/archive?path=/lnk", "")
	b, err := base64.StdEncoding.DecodeString(r.Header.Get("X-Docker-Container-Path-Stat"))
	if r.Status != http.StatusOK || err != nil || json.Unmarshal(b, &st) != nil ||
		st.Name != "lnk" || st.LinkTarget != "/data" || os.FileMode(st.Mode)&os.ModeSymlink == 0 {
		t.Errorf("HEAD archive of /lnk: %d, stat %s (%+v)", r.Status, b, st)
	}
	// A trailing slash follows the link; entries keep the asked name.
	if got := tarNames(t, "/containers/"+name+"/archive?path=/lnk/"); got != "lnk/ lnk/f lnk/sub/" {
		t.Errorf("archive of /lnk/ = %q", got)
	}
	if got := tarNames(t, "/containers/"+name+"/archive?path=/lnk"); got != "lnk" {
		t.Errorf("archive of /lnk = %q", got)
	}
	for _, tt := range []struct {
		method, path string
		status       int
		msg          string
	}{
		{"GET", "/containers/" + name + "/archive?path=/nope", http.StatusNotFound, "Could not find the file /nope in container " + name},
		{"GET", "/containers/" + name + "/archive", http.StatusBadRequest, "bad parameter: pathcannot be empty"},
		{"PUT", "/containers/" + name + "/archive?path=/nope", http.StatusNotFound, "Could not find the file /nope in container " + name},
		{"PUT", "/containers/" + name + "/archive?path=/data/f", http.StatusInternalServerError, "extraction point is not a directory"},
	} {
		if r := api(t, tt.method, tt.path, ""); r.Status != tt.status || r.Body != errorMessage(tt.msg) {
			t.Errorf("%s %s = %d %q, want %d %q", tt.method, tt.path, r.Status, r.Body, tt.status, tt.msg)
		}
	}

	// docker cp both ways.
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "in/d"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "in/d/a"), []byte("one\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "in/b"), []byte("two\n"), 0o640))
	if r := docker(t, "cp", filepath.Join(dir, "in/d"), name+":/data/"); r != (result{}) {
		t.Errorf("cp dir in = %+v", r)
	}
	if r := docker(t, "cp", filepath.Join(dir, "in/b"), name+":/data/f2"); r != (result{}) {
		t.Errorf("cp file in = %+v", r)
	}
	if got := mustDocker(t, "exec", name, "sh", "-c", "cat /data/d/a /data/f2; stat -c %a /data/f2"); got != "one\ntwo\n640\n" {
		t.Errorf("copied files in the container: %q", got)
	}
	want := result{Code: 1, Stderr: "Error response from daemon: Could not find the file /nope in container " + name + "\n"}
	if r := docker(t, "cp", filepath.Join(dir, "in/b"), name+":/nope/x"); r != want {
		t.Errorf("cp into a missing dir = %+v, want %+v", r, want)
	}
	if r := docker(t, "cp", name+":/data", filepath.Join(dir, "out")); r != (result{}) {
		t.Errorf("cp dir out = %+v", r)
	}
	if got := listTree(t, filepath.Join(dir, "out")); got != "d/ d/a f f2 sub/" {
		t.Errorf("copied out: %q", got)
	}
	if r := docker(t, "cp", name+":/nope", filepath.Join(dir, "x")); r != want {
		t.Errorf("cp a missing file out = %+v, want %+v", r, want)
	}

	// A stopped container's files can be copied too.
	mustDocker(t, "stop", "-t", "0", name)
	if r := docker(t, "cp", name+":/data/f", filepath.Join(dir, "stopped")); r != (result{}) {
		t.Errorf("cp out of a stopped container = %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "stopped")); err != nil || string(b) != "hello\n" {
		t.Errorf("file copied out of a stopped container: %q, %v", b, err)
	}
	if r := docker(t, "cp", filepath.Join(dir, "in/b"), name+":/data/f3"); r != (result{}) {
		t.Errorf("cp into a stopped container = %+v", r)
	}
	mustDocker(t, "start", name)
	if got := mustDocker(t, "exec", name, "cat", "/data/f3"); got != "two\n" {
		t.Errorf("file copied into the stopped container: %q", got)
	}
	mustDocker(t, "rm", "-f", name)
}

// TestCopyHostileArchive: an uploaded archive whose names climb out of the
// destination is refused, and nothing lands outside it.
func TestCopyHostileArchive(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", "mkdir -p /dst; sleep 1000")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, tw.WriteHeader(&tar.Header{Name: "../../escaped", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}))
	_, _ = tw.Write([]byte("x"))
	must(t, tw.Close())
	eventually(t, "the destination exists", func() string {
		if r := docker(t, "exec", name, "test", "-d", "/dst"); r.Code != 0 {
			return "not yet"
		}
		return ""
	})
	r := api(t, "PUT", "/containers/"+name+"/archive?path=/dst", buf.String())
	if r.Status < 400 {
		t.Errorf("PUT of an archive climbing out of the destination: %d %q, want an error", r.Status, r.Body)
	}
	if r := docker(t, "exec", name, "sh", "-c", "test -e /escaped && echo present || echo absent"); r.Stdout != "absent\n" {
		t.Errorf("escaped file exists: %+v", r)
	}
	mustDocker(t, "rm", "-f", name)
}

func tarNames(t *testing.T, path string) string {
	t.Helper()
	r := api(t, "GET", path, "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
	}
	var names []string
	tr := tar.NewReader(strings.NewReader(r.Body))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("GET %s: bad tar: %v", path, err)
		}
		names = append(names, hdr.Name)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

func listTree(t *testing.T, root string) string {
	t.Helper()
	var names []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if fi.IsDir() {
			rel += "/"
		}
		names = append(names, rel)
		return nil
	})
	must(t, err)
	sort.Strings(names)
	return strings.Join(names, " ")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
