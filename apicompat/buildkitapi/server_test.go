package buildkitapi

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/buildkit/client"
	"github.com/moby/buildkit/client/llb"
	gateway "github.com/moby/buildkit/frontend/gateway/client"
	"github.com/tonistiigi/fsutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/husk-vm/husk/imagebuild/builder"
)

// fakeBuilder records what a build was given and plays its steps.
type fakeBuilder struct {
	mu         sync.Mutex
	opts       builder.BuildOptions
	files      []string
	dockerfile string
	err        error
}

func (f *fakeBuilder) Build(_ context.Context, opts builder.BuildOptions, out builder.Output) (string, error) {
	var files []string
	err := fs.WalkDir(os.DirFS(opts.ContextDir), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return err
		}
		if d.IsDir() {
			name += "/"
		}
		files = append(files, name)
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	f.mu.Lock()
	f.opts, f.files, f.dockerfile = opts, files, string(opts.DockerfileContent)
	f.mu.Unlock()
	out.Step("", 1, 2, "FROM box")
	out.Cached()
	out.Step("", 2, 2, "RUN echo hi")
	out.Stream("hi\n")
	if f.err != nil {
		return "", f.err
	}
	return "sha256:0123", nil
}

// hijackDialer dials path on srv and upgrades to h2c, as the docker
// client's DialHijack does.
func hijackDialer(srv *httptest.Server, path string) func(ctx context.Context, meta map[string][]string) (net.Conn, error) {
	return func(ctx context.Context, meta map[string][]string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
		if err != nil {
			return nil, err
		}
		req, _ := http.NewRequest(http.MethodPost, "http://daemon"+path, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "h2c")
		for k, vs := range meta {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		if err := req.Write(conn); err != nil {
			conn.Close()
			return nil, err
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			conn.Close()
			return nil, err
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			conn.Close()
			return nil, fmt.Errorf("POST %s: %s", path, resp.Status)
		}
		// The server's HTTP/2 preface may already be in br.
		return &bufferedConn{Conn: conn, r: br}, nil
	}
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func newTestClient(t *testing.T, b Builder, files ...ImageFiles) (*client.Client, *Server) {
	t.Helper()
	opts := Options{TempDir: t.TempDir(), Version: "test"}
	if len(files) > 0 {
		opts.Files = files[0]
	}
	s, err := New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /grpc", func(w http.ResponseWriter, r *http.Request) {
		if err := s.ServeGRPC(w, r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	})
	mux.HandleFunc("POST /session", func(w http.ResponseWriter, r *http.Request) {
		if err := s.ServeSession(r.Context(), w, r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	})
	srv := httptest.NewServer(mux)
	grpcDial, sessionDial := hijackDialer(srv, "/grpc"), hijackDialer(srv, "/session")
	c, err := client.New(context.Background(), "",
		client.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return grpcDial(ctx, nil) }),
		client.WithSessionDialer(func(ctx context.Context, _ string, meta map[string][]string) (net.Conn, error) {
			return sessionDial(ctx, meta)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		s.Close()
		srv.CloseClientConnections()
		srv.Close()
	})
	return c, s
}

// contextDir is a build context with a file .dockerignore leaves out.
func contextDir(t *testing.T) fsutil.FS {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"Dockerfile":    "FROM box\nRUN echo hi\n",
		".dockerignore": "secret\n",
		"secret":        "no",
		"sub/kept":      "yes",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A FIFO is never made on the daemon's side.
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := fsutil.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// collect gathers the vertex names and logs a solve reported.
func collect(ch chan *client.SolveStatus) (func() ([]string, string), chan struct{}) {
	var names []string
	var logs strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		seen := map[string]bool{}
		for st := range ch {
			for _, v := range st.Vertexes {
				if !seen[v.Digest.String()] {
					seen[v.Digest.String()] = true
					names = append(names, v.Name)
				}
			}
			for _, l := range st.Logs {
				logs.Write(l.Data)
			}
		}
	}()
	return func() ([]string, string) { <-done; return names, logs.String() }, done
}

func TestSolveDockerfile(t *testing.T) {
	fb := &fakeBuilder{}
	c, _ := newTestClient(t, fb)
	fs := contextDir(t)
	ch := make(chan *client.SolveStatus)
	result, _ := collect(ch)
	resp, err := c.Solve(context.Background(), nil, client.SolveOpt{
		Frontend:      "dockerfile.v0",
		FrontendAttrs: map[string]string{"build-arg:A": "b", "label:l": "v", "target": "t", "no-cache": ""},
		LocalMounts:   map[string]fsutil.FS{"context": fs, "dockerfile": fs},
		Exports:       []client.ExportEntry{{Type: "moby", Attrs: map[string]string{"name": "docker.io/library/x:latest,y:1"}}},
	}, ch)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ExporterResponse["containerimage.digest"]; got != "sha256:0123" {
		t.Errorf("containerimage.digest = %q", got)
	}
	names, logs := result()
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if want := []string{".dockerignore", "Dockerfile", "sub/", "sub/kept"}; !slices.Equal(fb.files, want) {
		t.Errorf("context = %q, want %q", fb.files, want)
	}
	if fb.dockerfile != "FROM box\nRUN echo hi\n" {
		t.Errorf("Dockerfile = %q", fb.dockerfile)
	}
	if a := fb.opts.BuildArgs["A"]; a == nil || *a != "b" {
		t.Errorf("build arg A = %v", a)
	}
	if fb.opts.Labels["l"] != "v" || fb.opts.Target != "t" || !fb.opts.NoCache {
		t.Errorf("options = %+v", fb.opts)
	}
	if want := []string{"docker.io/library/x:latest", "y:1"}; !slices.Equal(fb.opts.Tags, want) {
		t.Errorf("tags = %q, want %q", fb.opts.Tags, want)
	}
	wantNames := []string{"[internal] load build definition from Dockerfile", "[internal] load .dockerignore",
		"[internal] load build context", "[1/2] FROM box", "[2/2] RUN echo hi"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("vertexes = %q, want %q", names, wantNames)
	}
	if logs != "hi\n" {
		t.Errorf("logs = %q", logs)
	}
}

// buildx builds through the gateway: it asks for the Dockerfile solve
// itself and returns the result.
func TestGatewayBuild(t *testing.T) {
	fb := &fakeBuilder{}
	c, _ := newTestClient(t, fb)
	fs := contextDir(t)
	resp, err := c.Build(context.Background(), client.SolveOpt{
		LocalMounts: map[string]fsutil.FS{"context": fs, "dockerfile": fs},
		Exports:     []client.ExportEntry{{Type: "moby", Attrs: map[string]string{"name": "z"}}},
	}, "test", func(ctx context.Context, gc gateway.Client) (*gateway.Result, error) {
		return gc.Solve(ctx, gateway.SolveRequest{Frontend: "dockerfile.v0", FrontendOpt: map[string]string{"build-arg:B": "c"}})
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ExporterResponse["containerimage.digest"]; got != "sha256:0123" {
		t.Errorf("containerimage.digest = %q", got)
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if b := fb.opts.BuildArgs["B"]; b == nil || *b != "c" || !slices.Equal(fb.opts.Tags, []string{"z"}) {
		t.Errorf("options = %+v", fb.opts)
	}
}

// A gateway build whose export husk refuses fails, on both sides, rather
// than leaving the client's Solve waiting for a build that never starts.
func TestGatewayBuildRefused(t *testing.T) {
	c, _ := newTestClient(t, &fakeBuilder{})
	fs := contextDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.Build(ctx, client.SolveOpt{
		LocalMounts: map[string]fsutil.FS{"context": fs, "dockerfile": fs},
		Exports:     []client.ExportEntry{{Type: "oci", OutputDir: t.TempDir()}},
	}, "test", func(ctx context.Context, gc gateway.Client) (*gateway.Result, error) {
		return gc.Solve(ctx, gateway.SolveRequest{Frontend: "dockerfile.v0"})
	}, nil)
	if err == nil || !strings.Contains(err.Error(), `exporter "oci" is not supported by husk`) {
		t.Fatalf("err = %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the build hung until the test's deadline")
	}
}

func TestSolveErrors(t *testing.T) {
	fs := func(t *testing.T) map[string]fsutil.FS {
		f := contextDir(t)
		return map[string]fsutil.FS{"context": f, "dockerfile": f}
	}
	tests := []struct {
		name     string
		buildErr error
		opt      client.SolveOpt
		def      bool
		want     string
		code     codes.Code
	}{
		{name: "failed RUN", buildErr: &builder.ExitError{Command: "/bin/sh -c exit 3", Code: 3},
			opt:  client.SolveOpt{Frontend: "dockerfile.v0"},
			want: `process "/bin/sh -c exit 3" did not complete successfully: exit code: 3`, code: codes.Unknown},
		{name: "other frontend", opt: client.SolveOpt{Frontend: "gateway.v0"},
			want: `frontend "gateway.v0" is not supported by husk`, code: codes.Unimplemented},
		{name: "LLB", def: true, want: "LLB definitions are not supported", code: codes.Unimplemented},
		{name: "oci exporter", opt: client.SolveOpt{Frontend: "dockerfile.v0", Exports: []client.ExportEntry{{Type: "oci", OutputDir: "(temp)"}}},
			want: `exporter "oci" is not supported by husk`, code: codes.Unimplemented},
		{name: "local exporter without image files", opt: client.SolveOpt{Frontend: "dockerfile.v0", Exports: []client.ExportEntry{{Type: "local", OutputDir: "(temp)"}}},
			want: `exporter "local" is not available`, code: codes.Unimplemented},
		{name: "other platform", opt: client.SolveOpt{Frontend: "dockerfile.v0", FrontendAttrs: map[string]string{"platform": "linux/arm64"}},
			want: `"linux/arm64": husk builds only linux/amd64 images`, code: codes.Unknown},
		{name: "named context", opt: client.SolveOpt{Frontend: "dockerfile.v0", FrontendAttrs: map[string]string{"context:base": "docker-image://box"}},
			want: "named build contexts are not supported by husk: base", code: codes.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestClient(t, &fakeBuilder{err: tt.buildErr})
			tt.opt.LocalMounts = fs(t)
			for i := range tt.opt.Exports {
				// The client makes an exporter's directory itself.
				tt.opt.Exports[i].OutputDir = t.TempDir()
			}
			var def *llb.Definition
			if tt.def {
				d, err := llb.Image("box").Marshal(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				def = d
			}
			_, err := c.Solve(context.Background(), def, tt.opt, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if st, ok := status.FromError(errors.Unwrap(err)); !ok || st.Code() != tt.code {
				t.Errorf("code = %v, want %v", st.Code(), tt.code)
			}
		})
	}
}

func TestStepName(t *testing.T) {
	for _, tc := range []struct {
		stage    string
		n, total int
		want     string
	}{
		{"", 1, 3, "[1/3] RUN x"},
		{"build", 2, 12, "[build  2/12] RUN x"},
		{"stage-2", 10, 10, "[stage-2 10/10] RUN x"},
	} {
		if got := stepName(tc.stage, tc.n, tc.total, "RUN x"); got != tc.want {
			t.Errorf("stepName(%q, %d, %d) = %q, want %q", tc.stage, tc.n, tc.total, got, tc.want)
		}
	}
}

func TestBuildOptions(t *testing.T) {
	opts, err := buildOptions(map[string]string{
		"filename": "sub/Build.df", "image-resolve-mode": "pull", "force-network-mode": "none",
		"add-hosts": "a=10.0.0.1,b:10.0.0.2", "platform": "linux/amd64",
	})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Dockerfile != "sub/Build.df" || !opts.Pull || opts.Network.Mode != "none" || opts.Platform != "linux/amd64" {
		t.Errorf("options = %+v", opts)
	}
	if want := []string{"a:10.0.0.1", "b:10.0.0.2"}; !slices.Equal(opts.Network.ExtraHosts, want) {
		t.Errorf("extra hosts = %q, want %q", opts.Network.ExtraHosts, want)
	}
	if opts, _ := buildOptions(map[string]string{"force-network-mode": "sandbox"}); opts.Network.Mode != "" || opts.Dockerfile != "Dockerfile" {
		t.Errorf("default options = %+v", opts)
	}
}

// imageTar is a flattened image as fakeFiles writes it.
type fakeFiles struct{ id string }

func (f *fakeFiles) WriteRootfs(_ context.Context, id string, w io.Writer) error {
	f.id = id
	tw := tar.NewWriter(w)
	for _, h := range []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/conf", Typeflag: tar.TypeReg, Mode: 0o640, Size: 2},
		{Name: "ro/", Typeflag: tar.TypeDir, Mode: 0o555},
		{Name: "ro/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2},
		{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/conf"},
		{Name: "hard", Typeflag: tar.TypeLink, Linkname: "etc/conf"},
		{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o644},
		{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2},
	} {
		if err := tw.WriteHeader(&h); err != nil {
			return err
		}
		if h.Size > 0 {
			if _, err := io.WriteString(tw, "c\n"); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// docker build -o: the image's files come back to the client, into a
// directory (local) and as a tar (tar), with nothing of the image made
// outside the daemon's directory or as a device.
func TestExportToClient(t *testing.T) {
	files := &fakeFiles{}
	c, _ := newTestClient(t, &fakeBuilder{}, files)
	fs := contextDir(t)
	out := t.TempDir()
	var tarOut bytes.Buffer
	resp, err := c.Build(context.Background(), client.SolveOpt{
		LocalMounts: map[string]fsutil.FS{"context": fs, "dockerfile": fs},
		Exports: []client.ExportEntry{
			{Type: "local", OutputDir: out},
			{Type: "tar", Output: func(map[string]string) (io.WriteCloser, error) { return nopCloser{&tarOut}, nil }},
		},
	}, "test", func(ctx context.Context, gc gateway.Client) (*gateway.Result, error) {
		return gc.Solve(ctx, gateway.SolveRequest{Frontend: "dockerfile.v0"})
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if files.id != "sha256:0123" {
		t.Errorf("exported image %q", files.id)
	}
	if d, ok := resp.ExporterResponse["containerimage.digest"]; ok {
		t.Errorf("an export to the client only reported image %s", d)
	}
	for name, want := range map[string]string{"etc/conf": "c\n", "hard": "c\n", "ro/f": "c\n", "escape": "c\n"} {
		if b, err := os.ReadFile(filepath.Join(out, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v", name, b, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(out, "link")); err != nil || l != "/etc/conf" {
		t.Errorf("link -> %q, %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(out, "fifo")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the FIFO was made: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(out, "ro")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("ro: %v, %v", fi, err)
	}
	var names []string
	tr := tar.NewReader(&tarOut)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if !slices.Contains(names, "etc/conf") || !slices.Contains(names, "fifo") || slices.Contains(names, "./") {
		t.Errorf("tar holds %q", names)
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// An image whose names would lead out of the directory it is unpacked
// into cannot write there.
func TestUnpackStaysInside(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside})
	_ = tw.WriteHeader(&tar.Header{Name: "out/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	if err := unpack(dir, &b); err == nil {
		t.Error("unpack wrote through a link that leaves its directory")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("written outside: %v", entries)
	}
}
