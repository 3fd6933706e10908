package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

// importTar is a root filesystem as `docker import` takes it: the test
// busybox, a shell and a file to print.
func importTar(t *testing.T) []byte {
	t.Helper()
	bb, err := os.ReadFile(testimages.DefaultBusybox)
	if err != nil {
		t.Fatalf("read busybox: %v", err)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	mod := time.Unix(1700000000, 0)
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mod},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb)), ModTime: mod},
		{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "busybox", ModTime: mod},
		{Name: "bin/cat", Typeflag: tar.TypeSymlink, Linkname: "busybox", ModTime: mod},
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mod},
		{Name: "etc/msg", Typeflag: tar.TypeReg, Mode: 0o644, Size: 9, ModTime: mod},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case "bin/busybox":
			tw.Write(bb)
		case "etc/msg":
			tw.Write([]byte("imported\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestImport imports a root filesystem from a file, from stdin (gzipped)
// and from a URL served inside the suite's network namespace, runs it,
// and checks dockerd's refusals; every expectation was checked against
// dockerd 20.10.
func TestImport(t *testing.T) {
	requireSuite(t)
	const repo = "e2e-import"
	tags := []string{repo + ":file", repo + ":stdin", repo + ":url"}
	t.Cleanup(func() { docker(t, append([]string{"rmi"}, tags...)...) })
	layer := importTar(t)
	diffID := fmt.Sprintf("sha256:%x", sha256.Sum256(layer))
	path := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(path, layer, 0o644); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(layer)
	zw.Close()

	// A URL inside the suite's namespace, where the daemon is.
	var l net.Listener
	if err := suiteNetns().Do(func() (err error) { l, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/rootfs.tar" {
			http.NotFound(w, r)
			return
		}
		w.Write(layer)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + l.Addr().String()

	since := fmt.Sprint(time.Now().Unix())
	for _, tt := range []struct {
		tag, comment string
		args         []string
		stdin        []byte
		prefix       string // printed before the image ID
	}{
		{tags[0], "a note", []string{"-c", `CMD ["cat","/etc/msg"]`, "-m", "a note", path}, nil, ""},
		{tags[1], "Imported from -", []string{"-c", `CMD ["cat","/etc/msg"]`, "-"}, gz.Bytes(), ""},
		{tags[2], "Imported from " + url + "/rootfs.tar", []string{"-c", `CMD ["cat","/etc/msg"]`, url + "/rootfs.tar"}, nil,
			"Downloading from " + url + "/rootfs.tar\n"},
	} {
		var in *bytes.Reader
		if tt.stdin != nil {
			in = bytes.NewReader(tt.stdin)
		}
		args := append(append([]string{"import"}, tt.args...), tt.tag)
		var r result
		if in != nil {
			r = dockerStdin(t, in, args...)
		} else {
			r = docker(t, args...)
		}
		id, ok := strings.CutPrefix(r.Stdout, tt.prefix)
		if r.Code != 0 || r.Stderr != "" || !ok || !imageIDLine.MatchString(id) {
			t.Errorf("docker %q = %+v, want %q and an image ID", args, r, tt.prefix)
			continue
		}
		want := fmt.Sprintf("%s|%s|[cat /etc/msg]|amd64|linux|[%s]|1\n", strings.TrimSpace(id), tt.comment, diffID)
		if got := mustDocker(t, "image", "inspect", "-f", "{{.Id}}|{{.Comment}}|{{.Config.Cmd}}|{{.Architecture}}|{{.Os}}|{{.RootFS.Layers}}|{{len .RootFS.Layers}}", tt.tag); got != want {
			t.Errorf("inspect %s = %q, want %q", tt.tag, got, want)
		}
		if r := docker(t, "run", "--rm", tt.tag); r != (result{Stdout: "imported\n"}) {
			t.Errorf("run %s = %+v", tt.tag, r)
		}
	}
	// dockerd reports the tag, then the import, with the image ID as actor.
	id := strings.TrimSpace(mustDocker(t, "image", "inspect", "-f", "{{.Id}}", tags[0]))
	events := mustDocker(t, "events", "--since", since, "--until", fmt.Sprint(time.Now().Unix()+1),
		"--filter", "type=image", "--filter", "image="+id, "--format", "{{.Action}} {{.Actor.ID}} {{.Actor.Attributes.name}}")
	if want := fmt.Sprintf("tag %s %s\nimport %s %s\n", id, tags[0], id, id); events != want {
		t.Errorf("events = %q, want %q", events, want)
	}

	// Refusals, in dockerd's words; none leaves an image behind.
	for _, tt := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"not a tar", []string{"import", "-", repo + ":bad"}, strings.Repeat("not a tar archive\n", 40),
			"Error processing tar file: archive/tar: invalid tar header"},
		{"bad change", []string{"import", "-c", "RUN true", path, repo + ":bad"}, "", "run is not a valid change command"},
		{"digest reference", []string{"import", path, repo + "@sha256:" + strings.Repeat("0", 64)}, "", "cannot import digest reference"},
		{"missing URL", []string{"import", url + "/nothere.tar", repo + ":bad"}, "",
			"failed to GET " + url + "/nothere.tar with status 404 Not Found: 404 page not found"},
	} {
		r := dockerStdin(t, strings.NewReader(tt.stdin), tt.args...)
		if want := (result{Code: 1, Stderr: "Error response from daemon: " + tt.want + "\n"}); r != want {
			t.Errorf("%s: docker %q = %+v, want %+v", tt.name, tt.args, r, want)
		}
	}
	if r := docker(t, "images", "-q", repo+":bad"); r != (result{}) {
		t.Errorf("refused imports left %+v", r)
	}
}
