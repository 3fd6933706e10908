package apicompat

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/gzip"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"

	"github.com/husk-vm/husk/imagebuild/builder"
)

// fakeBuilder records the request and plays a scripted build.
type fakeBuilder struct {
	opts    builder.BuildOptions
	context []byte
	err     error
	// failLate fails with err after the step's output, as a COPY of a
	// missing file does.
	failLate bool
}

func (f *fakeBuilder) Build(ctx context.Context, opts builder.BuildOptions, out builder.Output) (string, error) {
	f.opts = opts
	f.context, _ = io.ReadAll(opts.Context)
	if f.failLate {
		out.Stream("Step 1/1 : COPY nosuch /x\n")
		return "", f.err
	}
	if f.err != nil && !strings.Contains(f.err.Error(), "returned a non-zero code") {
		return "", f.err
	}
	out.Stream("Step 1/1 : RUN x\n")
	out.Aux("sha256:abc")
	return "sha256:abc", f.err
}

// pushImages is fakeImages with history and push.
type pushImages struct {
	*fakeImages
	pushed []string
}

func (p *pushImages) History(ctx context.Context, ref string) ([]image.HistoryResponseItem, error) {
	if ref != "x:1" {
		return nil, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	return []image.HistoryResponseItem{{ID: "sha256:abc", CreatedBy: "/bin/sh -c true", Tags: []string{"x:1"}}}, nil
}

func (p *pushImages) Push(ctx context.Context, repo, tag string, auth *registry.AuthConfig, progress func(jsonstream.Message)) error {
	user := ""
	if auth != nil {
		user = auth.Username
	}
	p.pushed = append(p.pushed, repo+"|"+tag+"|"+user)
	progress(jsonstream.Message{Status: "The push refers to repository [" + repo + "]"})
	return nil
}

func newBuildEnv(t *testing.T, b Builder) (*httptest.Server, *pushImages) {
	t.Helper()
	imgs := &pushImages{fakeImages: &fakeImages{}}
	srv := httptest.NewServer(New(Config{Images: imgs, Containers: newFakeContainers(), System: fakeSystem{}, Builder: b}))
	t.Cleanup(srv.Close)
	return srv, imgs
}

func post(t *testing.T, url string, body []byte, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestBuildRequest(t *testing.T) {
	fb := &fakeBuilder{}
	srv, _ := newBuildEnv(t, fb)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("the context tar"))
	zw.Close()
	cfg, _ := json.Marshal(map[string]registry.AuthConfig{"reg:5000": {Username: "u"}})
	q := "t=a:1&t=b&dockerfile=sub/Dockerfile&target=s&nocache=1&pull=true&forcerm=1&rm=0" +
		"&buildargs=%7B%22A%22%3A%221%22%2C%22B%22%3Anull%7D&labels=%7B%22l%22%3A%22v%22%7D&platform=linux/amd64"
	code, body := post(t, srv.URL+"/v1.50/build?"+q, gz.Bytes(), map[string]string{"X-Registry-Config": base64.URLEncoding.EncodeToString(cfg)})
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	o := fb.opts
	if string(fb.context) != "the context tar" {
		t.Errorf("context = %q, want it decompressed", fb.context)
	}
	if strings.Join(o.Tags, ",") != "a:1,b" || o.Dockerfile != "sub/Dockerfile" || o.Target != "s" || !o.NoCache || !o.Pull ||
		!o.ForceRemove || !o.Remove || o.Labels["l"] != "v" || *o.BuildArgs["A"] != "1" || o.BuildArgs["B"] != nil || o.Auth["reg:5000"].Username != "u" {
		t.Errorf("options = %+v", o)
	}
	want := `{"stream":"Step 1/1 : RUN x\n"}` + "\r\n" + `{"aux":{"ID":"sha256:abc"}}` + "\r\n"
	if body != want {
		t.Errorf("body = %q, want %q", body, want)
	}

	// rm defaults to true; q replaces the stream by the ID.
	if _, body = post(t, srv.URL+"/build?q=1", []byte("tar"), nil); !fb.opts.Remove || !strings.Contains(body, `{"stream":"sha256:abc\n"}`) || strings.Contains(body, "Step") {
		t.Errorf("quiet build: remove=%v body %q", fb.opts.Remove, body)
	}
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code int
		body string
	}{
		{"exit code in errorDetail", &builder.ExitError{Command: "/bin/sh -c exit 7", Code: 7}, 200,
			`{"errorDetail":{"code":7,"message":"The command '/bin/sh -c exit 7' returned a non-zero code: 7"},"error":"The command '/bin/sh -c exit 7' returned a non-zero code: 7"}`},
		{"error before output", errdefs.ErrInvalidArgument.WithMessage("dockerfile parse error line 2: unknown instruction: FOO"), 400,
			`{"message":"dockerfile parse error line 2: unknown instruction: FOO"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := newBuildEnv(t, &fakeBuilder{err: tc.err})
			code, body := post(t, srv.URL+"/build", []byte("tar"), nil)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("got %d %q, want %d with %q", code, body, tc.code, tc.body)
			}
		})
	}
	// With q, a failed build sends the output it held back, then the
	// error in the stream, as dockerd does.
	for _, fb := range []*fakeBuilder{
		{err: errors.New("COPY failed: file not found in build context"), failLate: true},
		{err: &builder.ExitError{Command: "/bin/sh -c exit 7", Code: 7}},
	} {
		srv, _ := newBuildEnv(t, fb)
		code, body := post(t, srv.URL+"/build?q=1", []byte("tar"), nil)
		lines := strings.Split(strings.TrimSpace(body), "\r\n")
		if code != 200 || len(lines) < 2 || !strings.HasPrefix(lines[0], `{"stream":"Step 1/1 : `) ||
			!strings.Contains(lines[len(lines)-1], `"error":"`+fb.err.Error()+`"`) {
			t.Errorf("quiet failed build: %d %q, want the held step, then the error", code, body)
		}
	}
	srv, _ := newBuildEnv(t, nil)
	if code, _ := post(t, srv.URL+"/build", []byte("tar"), nil); code != http.StatusNotImplemented {
		t.Errorf("build without a builder: %d, want 501", code)
	}
}

func TestHistoryAndPush(t *testing.T) {
	srv, imgs := newBuildEnv(t, nil)
	resp, err := http.Get(srv.URL + "/v1.50/images/x:1/history")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `[{"Comment":"","Created":0,"CreatedBy":"/bin/sh -c true","Id":"sha256:abc","Size":0,"Tags":["x:1"]}]` + "\n"; string(b) != want {
		t.Errorf("history = %s", b)
	}
	resp, err = http.Get(srv.URL + "/images/nope/history")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("history of a missing image: %d", resp.StatusCode)
	}

	auth := base64.URLEncoding.EncodeToString([]byte(`{"username":"me"}`))
	code, body := post(t, srv.URL+"/images/localhost:5000/x/push?tag=v1", nil, map[string]string{"X-Registry-Auth": auth})
	if code != 200 || body != `{"status":"The push refers to repository [localhost:5000/x]"}`+"\r\n" {
		t.Errorf("push = %d %q", code, body)
	}
	if _, _ = post(t, srv.URL+"/images/localhost:5000/y:v2/push", nil, nil); strings.Join(imgs.pushed, " ") != "localhost:5000/x|v1|me localhost:5000/y|v2|" {
		t.Errorf("pushes = %v", imgs.pushed)
	}
}

// waitingBuilder builds until it is cancelled.
type waitingBuilder struct{ started chan string }

func (w *waitingBuilder) Build(ctx context.Context, opts builder.BuildOptions, out builder.Output) (string, error) {
	out.Stream("Step 1/1 : RUN sleep 1000\n")
	w.started <- opts.Tags[0]
	<-ctx.Done()
	return "", ctx.Err()
}

// TestBuildCancel: POST /build/cancel stops the builds that named
// themselves with its id, and only those; without an id it is refused
// as dockerd refuses it.
func TestBuildCancel(t *testing.T) {
	b := &waitingBuilder{started: make(chan string, 2)}
	srv, _ := newBuildEnv(t, b)
	type answer struct {
		code int
		body string
	}
	build := func(tag, id string) chan answer {
		done := make(chan answer, 1)
		go func() {
			code, body := post(t, srv.URL+"/build?t="+tag+"&buildid="+id, []byte("tar"), nil)
			done <- answer{code, body}
		}()
		<-b.started
		return done
	}
	one, other := build("one", "b1"), build("other", "b2")
	if code, body := post(t, srv.URL+"/build/cancel", nil, nil); code != 400 || body != jsonError("build ID not provided") {
		t.Errorf("cancel without an id = %d %q", code, body)
	}
	if code, body := post(t, srv.URL+"/build/cancel?id=nope", nil, nil); code != 200 || body != "" {
		t.Errorf("cancel of an unknown id = %d %q", code, body)
	}
	if code, body := post(t, srv.URL+"/build/cancel?id=b1", nil, nil); code != 200 || body != "" {
		t.Errorf("cancel = %d %q", code, body)
	}
	got := <-one
	if got.code != 200 || !strings.Contains(got.body, `"error":"context canceled"`) {
		t.Errorf("the cancelled build answered %d %q, want its output and the cancel as an error in the stream", got.code, got.body)
	}
	select {
	case a := <-other:
		t.Fatalf("a build with another id ended too: %+v", a)
	default:
	}
	post(t, srv.URL+"/build/cancel?id=b2", nil, nil)
	<-other
}
