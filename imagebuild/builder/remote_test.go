package builder

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRemoteURLContext(t *testing.T) {
	ctxTar := makeTar(t, file{name: "Dockerfile", body: "FROM scratch\nCOPY a /a\n"}, file{name: "a", body: "from the tar\n"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ctx.tar":
			_, _ = w.Write(ctxTar)
		case "/ctx.tar.gz":
			w.Header().Set("Content-Type", "application/x-gzip")
			_, _ = w.Write(gzipped(t, ctxTar))
		case "/Dockerfile":
			// Served as octet-stream, as servers do a file without an
			// extension: the content tells it is text.
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write([]byte("FROM scratch\nLABEL from=text\n"))
		case "/page":
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html></html>"))
		case "/empty":
			w.Header().Set("Content-Type", "application/x-tar")
		default:
			http.Error(w, "no such file", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	f := newFixture(t)
	for _, path := range []string{"/ctx.tar", "/ctx.tar.gz"} {
		t.Run(path, func(t *testing.T) {
			out, id, err := f.build(BuildOptions{Remote: srv.URL + path})
			if err != nil {
				t.Fatalf("build: %v\n%s", err, out)
			}
			if got := f.files(id)["a"]; got != "0:0 644 from the tar\n" {
				t.Errorf("a = %q, want the tar's file", got)
			}
		})
	}
	t.Run("Dockerfile", func(t *testing.T) {
		out, id, err := f.build(BuildOptions{Remote: srv.URL + "/Dockerfile", Dockerfile: "sub/Dockerfile"})
		if err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
		if got := f.config(id).Config.Config.Labels["from"]; got != "text" {
			t.Errorf("label from = %q, want the downloaded Dockerfile's", got)
		}
	})
	for _, tc := range []struct {
		name, remote, want string
		notFound           bool
	}{
		{"404", srv.URL + "/nope", "error downloading remote context " + srv.URL + "/nope: failed to GET " + srv.URL + "/nope with status 404 Not Found: no such file", true},
		{"html", srv.URL + "/page", "error detecting content type for remote " + srv.URL + "/page: unsupported Content-Type \"text/html\"", false},
		{"empty", srv.URL + "/empty", "error detecting content type for remote " + srv.URL + "/empty: empty response", false},
		{"not a URL", "ftp://x/y", "remoteURL (ftp://x/y) could not be recognized as URL", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := f.build(BuildOptions{Remote: tc.remote})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if errdefs.IsNotFound(err) != tc.notFound {
				t.Errorf("IsNotFound = %v, want %v", errdefs.IsNotFound(err), tc.notFound)
			}
		})
	}
}

// TestRemoteGitContext clones over git's "dumb" http protocol, which a
// plain file server speaks.
func TestRemoteGitContext(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", work}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME=/dev/null",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	for name, body := range map[string]string{
		"Dockerfile":     "FROM scratch\nCOPY a /a\n",
		"a":              "master\n",
		"sub/Dockerfile": "FROM scratch\nCOPY b /b\n",
		"sub/b":          "sub\n",
	} {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(work, "escape")); err != nil {
		t.Fatal(err)
	}
	git("init", "-q", "-b", "master")
	git("add", ".")
	git("commit", "-q", "-m", "one")
	git("tag", "v1")
	if err := os.WriteFile(filepath.Join(work, "a"), []byte("later\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("commit", "-q", "-am", "two")
	bare := filepath.Join(dir, "srv", "repo.git")
	if out, err := exec.Command("git", "clone", "-q", "--bare", work, bare).CombinedOutput(); err != nil {
		t.Fatalf("git clone --bare: %v\n%s", err, out)
	}
	if out, err := exec.Command("git", "-C", bare, "update-server-info").CombinedOutput(); err != nil {
		t.Fatalf("git update-server-info: %v\n%s", err, out)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Join(dir, "srv"))))
	defer srv.Close()

	f := newFixture(t)
	for _, tc := range []struct{ fragment, file, want string }{
		{"", "a", "0:0 644 later\n"},
		{"#v1", "a", "0:0 644 master\n"},
		{"#master:sub", "b", "0:0 644 sub\n"},
	} {
		t.Run(tc.fragment, func(t *testing.T) {
			out, id, err := f.build(BuildOptions{Remote: srv.URL + "/repo.git" + tc.fragment})
			if err != nil {
				t.Fatalf("build: %v\n%s", err, out)
			}
			if got := f.files(id)[tc.file]; got != tc.want {
				t.Errorf("%s = %q, want %q", tc.file, got, tc.want)
			}
		})
	}
	for _, tc := range []struct{ fragment, want string }{
		{"#:escape", "error setting git context, \"escape\" not within git root"},
		{"#:a", "error setting git context, not a directory"},
		{"#nope", "error fetching: "},
		{"#-x", "invalid refspec: -x"},
	} {
		t.Run(tc.fragment, func(t *testing.T) {
			_, _, err := f.build(BuildOptions{Remote: srv.URL + "/repo.git" + tc.fragment})
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to start %q", err, tc.want)
			}
		})
	}
	if left, _ := filepath.Glob(filepath.Join(f.b.tmp, "build-git-*")); len(left) != 0 {
		t.Errorf("clones left behind: %v", left)
	}
}
