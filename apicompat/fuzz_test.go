package apicompat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
)

// The fuzz targets feed the request decoders arbitrary input through the
// whole handler (routing, version check, decoding, the fake backend) and
// hold them to what a client relies on: no panic, and an error is a typed
// client error (4xx) with a message, never a 500. 501 is allowed where it
// is the deliberate answer for something husk does not do. Seeds are in
// testdata/fuzz/<target>; run one with
// `go test -run '^$' -fuzz '^FuzzCreateContainer$' -fuzztime 60s ./apicompat`.

// checkAnswer fails t unless status is success or a client error with a
// message.
func checkAnswer(t *testing.T, what string, status int, msg string) {
	t.Helper()
	if status >= 500 && status != http.StatusNotImplemented {
		t.Fatalf("%s: status %d %q, want success or a client error", what, status, msg)
	}
	if status >= 400 && strings.TrimSpace(msg) == "" {
		t.Fatalf("%s: status %d without a message", what, status)
	}
}

// createRecorder accepts every create but of the image "missing" and
// keeps the last request.
type createRecorder struct {
	*fakeContainers
	mu   sync.Mutex
	last *CreateRequest
}

func (c *createRecorder) Create(_ context.Context, req CreateRequest) (container.CreateResponse, error) {
	if req.Config.Image == "missing" {
		return container.CreateResponse{}, errdefs.ErrNotFound.WithMessage("No such image: missing:latest")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = &req
	return container.CreateResponse{ID: "c1"}, nil
}

func (c *createRecorder) take() *CreateRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.last
	c.last = nil
	return r
}

// FuzzCreateContainer: POST /containers/create with any name and body.
// What reaches the backend has dockerd's defaults filled in: a host
// config, a network mode other than "default", endpoint settings without
// a "default" key, and a valid name.
func FuzzCreateContainer(f *testing.F) {
	f.Add("", []byte(`{"Image":"alpine"}`))
	f.Add("web", []byte(`{"Image":"alpine","HostConfig":{"NetworkMode":"default"},"NetworkingConfig":{"EndpointsConfig":{"default":{}}}}`))
	rec := &createRecorder{fakeContainers: newFakeContainers()}
	h, _ := newBadInputServer(f, rec)
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		status, msg, _ := serveRaw(h, "POST", "/v1.50/containers/create?name="+url.QueryEscape(name), "application/json", body)
		checkAnswer(t, "create", status, msg)
		req := rec.take()
		if status != http.StatusCreated {
			if req != nil {
				t.Fatalf("create answered %d but reached the backend", status)
			}
			return
		}
		if req == nil {
			t.Fatal("create answered 201 without reaching the backend")
		}
		if req.Name != name || (name != "" && !validContainerName.MatchString(name)) {
			t.Fatalf("backend got name %q for %q", req.Name, name)
		}
		if req.Config == nil || req.HostConfig == nil || req.Networking == nil || req.Networking.EndpointsConfig == nil {
			t.Fatalf("backend got a request with nil parts: %+v", req)
		}
		if m := req.HostConfig.NetworkMode; m == "" || m.IsDefault() {
			t.Fatalf("network mode %q reached the backend", m)
		}
		if _, ok := req.Networking.EndpointsConfig[network.NetworkDefault]; ok && req.HostConfig.NetworkMode == network.NetworkBridge {
			t.Fatal(`endpoint settings for "default" were not moved to "bridge"`)
		}
	})
}

// FuzzFilters: the filters query parameter. An error is always dockerd's
// 400 "invalid filter"; a result holds what either encoding says.
func FuzzFilters(f *testing.F) {
	f.Add(`{"status":["running"]}`)
	f.Add(`{"label":{"a=b":true}}`)
	f.Fuzz(func(t *testing.T, raw string) {
		r := &http.Request{Form: url.Values{"filters": {raw}}}
		got, err := parseFilters(r)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) || err.Error() != "invalid filter" {
				t.Fatalf("parseFilters(%q) = %v, want an invalid argument \"invalid filter\"", raw, err)
			}
			return
		}
		if got == nil {
			t.Fatalf("parseFilters(%q) = nil map", raw)
		}
		var sets map[string]map[string]bool
		var lists map[string][]string
		switch {
		case raw == "":
			if len(got) != 0 {
				t.Fatalf("empty filters gave %v", got)
			}
		case json.Unmarshal([]byte(raw), &sets) == nil:
			for k, vs := range sets {
				if len(got[k]) != len(vs) {
					t.Fatalf("parseFilters(%q)[%q] = %v, want the %d keys of %v", raw, k, got[k], len(vs), vs)
				}
				for _, v := range got[k] {
					if _, ok := vs[v]; !ok {
						t.Fatalf("parseFilters(%q)[%q] has %q, not in %v", raw, k, v, vs)
					}
				}
			}
		case json.Unmarshal([]byte(raw), &lists) == nil:
			for k, vs := range lists {
				if !reflect.DeepEqual(got[k], vs) {
					t.Fatalf("parseFilters(%q)[%q] = %v, want %v", raw, k, got[k], vs)
				}
			}
		default:
			t.Fatalf("parseFilters(%q) accepted what neither encoding reads: %v", raw, got)
		}
	})
}

// fuzzBody posts body (with ctype) to target on a server with fake
// backends and checks the answer.
func fuzzBody(f *testing.F, target string, check func(t *testing.T, body []byte, status int, msg string)) {
	h, _ := newBadInputServer(f, nil)
	f.Fuzz(func(t *testing.T, ctype string, body []byte) {
		status, msg, _ := serveRaw(h, "POST", target, ctype, body)
		checkAnswer(t, target, status, msg)
		if check != nil {
			check(t, body, status, msg)
		}
	})
}

// FuzzExecCreate: POST /containers/{name}/exec. A 201 needs a body that
// decodes to a command.
func FuzzExecCreate(f *testing.F) {
	f.Add("application/json", []byte(`{"Cmd":["sh","-c","echo hi"],"AttachStdout":true,"Tty":true,"Env":["A=b"]}`))
	f.Add("", []byte(nil))
	fuzzBody(f, "/v1.50/containers/running/exec", func(t *testing.T, body []byte, status int, _ string) {
		if status != http.StatusCreated {
			return
		}
		// Like dockerd's ReadJSON, only the first document counts: a
		// stray closing bracket after it is not "more content".
		var req container.ExecCreateRequest
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil || len(req.Cmd) == 0 {
			t.Fatalf("exec create accepted %q (%v)", body, err)
		}
	})
}

// FuzzNetworkCreate: POST /networks/create. A 201 needs a non-blank name.
func FuzzNetworkCreate(f *testing.F) {
	f.Add("application/json", []byte(`{"Name":"n","Driver":"bridge","IPAM":{"Config":[{"Subnet":"10.9.0.0/24"}]},"Labels":{"a":"b"}}`))
	f.Add("application/json; charset=utf-8", []byte(`{"Name":"taken"}`))
	fuzzBody(f, "/v1.50/networks/create", func(t *testing.T, body []byte, status int, _ string) {
		if status != http.StatusCreated {
			return
		}
		var req network.CreateRequest
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil || strings.TrimSpace(req.Name) == "" {
			t.Fatalf("network create accepted %q (%v)", body, err)
		}
	})
}

// FuzzVolumeCreate: POST /volumes/create.
func FuzzVolumeCreate(f *testing.F) {
	f.Add("application/json", []byte(`{"Name":"v","Driver":"local","DriverOpts":{"type":"tmpfs"},"Labels":{"a":"b"}}`))
	f.Add("application/json", []byte(`{"ClusterVolumeSpec":{}}`))
	fuzzBody(f, "/v1.50/volumes/create", nil)
}

// FuzzBuildQuery: POST /build with any query and context. An error before
// the stream is a client error; a stream is JSON messages, one a line.
func FuzzBuildQuery(f *testing.F) {
	f.Add("t=a:1&t=b&buildargs=%7B%22A%22%3A%22b%22%7D&labels=%7B%7D&rm=0&forcerm=1&q=1", "", []byte{})
	f.Add("platform=linux%2Farm64&version=2&remote=x", "e30=", []byte{0x1f, 0x8b, 0})
	h, _ := newBadInputServer(f, nil)
	f.Fuzz(func(t *testing.T, query, registryConfig string, body []byte) {
		req := &http.Request{
			Method: "POST", URL: &url.URL{Path: "/v1.50/build", RawQuery: query},
			Header: http.Header{"Content-Type": {"application/x-tar"}, "X-Registry-Config": {registryConfig}},
			Body:   httpBody(body), ContentLength: int64(len(body)),
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(context.Background()))
		if rec.Code != http.StatusOK {
			var e struct{ Message string }
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			checkAnswer(t, "build", rec.Code, e.Message)
			return
		}
		sc := bufio.NewScanner(rec.Body)
		for sc.Scan() {
			if !json.Valid(sc.Bytes()) {
				t.Fatalf("build stream line %q is not JSON", sc.Text())
			}
		}
	})
}

// FuzzArchive: HEAD, GET and PUT /containers/{name}/archive with any path,
// any stat the backend reports and any upload. The stat header always
// decodes to what the backend said.
func FuzzArchive(f *testing.F) {
	f.Add(uint8(0), "/etc/passwd", "passwd", "", uint32(0o644), int64(1234), []byte{})
	f.Add(uint8(1), "/bin/sh", "sh", "/bin/busybox", uint32(0o777|1<<27), int64(12), []byte{})
	f.Add(uint8(2), "/tmp", "tmp", "", uint32(0o1777|1<<31), int64(4096), []byte("BZh91AY&SY"))
	h, arch := newBadInputServer(f, nil)
	methods := []string{"HEAD", "GET", "PUT"}
	f.Fuzz(func(t *testing.T, method uint8, p, name, link string, mode uint32, size int64, body []byte) {
		st := container.PathStat{Name: name, LinkTarget: link, Mode: os.FileMode(mode), Size: size}
		arch.mu.Lock()
		arch.stat = st
		arch.mu.Unlock()
		m := methods[int(method)%len(methods)]
		var rb []byte
		if m == "PUT" {
			rb = body
		}
		status, msg, hdr := serveRaw(h, m, "/v1.50/containers/running/archive?path="+url.QueryEscape(p), "application/x-tar", rb)
		if m == "HEAD" && status >= 400 {
			msg = "(HEAD has no body)"
		}
		checkAnswer(t, m+" archive", status, msg)
		if p == "" && status != http.StatusBadRequest {
			t.Fatalf("%s archive without a path: %d", m, status)
		}
		if m == "PUT" || status != http.StatusOK {
			return
		}
		raw, err := base64.StdEncoding.DecodeString(hdr.Get(pathStatHeader))
		if err != nil {
			t.Fatalf("%s header %q: %v", pathStatHeader, hdr.Get(pathStatHeader), err)
		}
		var got container.PathStat
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s header %q: %v", pathStatHeader, raw, err)
		}
		if utf8.ValidString(name) && utf8.ValidString(link) && !reflect.DeepEqual(got, st) {
			t.Fatalf("%s header says %+v, backend said %+v", pathStatHeader, got, st)
		}
	})
}

// apiVersionPath is the shape dockerd's router gives a version prefix.
var apiVersionPath = regexp.MustCompile(`^[0-9.]+$`)

// FuzzAPIVersion: any "/v<version>/_ping". A version the router takes is
// served exactly when it lies within [1.24, 1.50], and otherwise refused
// with dockerd's message; anything else is "page not found".
func FuzzAPIVersion(f *testing.F) {
	f.Add("1.41")
	f.Add("1.12")
	f.Add("9.99")
	f.Add("1.50.0.0")
	h, _ := newBadInputServer(f, nil)
	f.Fuzz(func(t *testing.T, v string) {
		if versionLess(v, v) {
			t.Fatalf("versionLess(%q, itself)", v)
		}
		for _, o := range []string{"1.24", "1.50", "1.5"} {
			if versionLess(v, o) && versionLess(o, v) {
				t.Fatalf("versionLess(%q, %q) both ways", v, o)
			}
		}
		req := &http.Request{Method: "GET", URL: &url.URL{Path: "/v" + v + "/_ping"}, Header: http.Header{}}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(context.Background()))
		body := strings.TrimSpace(rec.Body.String())
		checkAnswer(t, "ping", rec.Code, body)
		if strings.Contains(v, "/") {
			// Another path altogether.
			return
		}
		switch {
		case !apiVersionPath.MatchString(v):
			if rec.Code != http.StatusNotFound && rec.Code != http.StatusOK {
				t.Fatalf("/v%s/_ping: %d %q", v, rec.Code, body)
			}
		case versionLess(v, "1.24"):
			want := fmt.Sprintf("client version %s is too old. Minimum supported API version is 1.24, please upgrade your client to a newer version", v)
			if rec.Code != http.StatusBadRequest || body != want {
				t.Fatalf("/v%s/_ping: %d %q, want 400 %q", v, rec.Code, body, want)
			}
		case versionLess("1.50", v):
			want := fmt.Sprintf(`{"message":"client version %s is too new. Maximum supported API version is 1.50"}`, v)
			if rec.Code != http.StatusBadRequest || body != want {
				t.Fatalf("/v%s/_ping: %d %q, want 400 %q", v, rec.Code, body, want)
			}
		default:
			if rec.Code != http.StatusOK {
				t.Fatalf("/v%s/_ping: %d %q, want 200", v, rec.Code, body)
			}
		}
	})
}

func httpBody(b []byte) *bodyReader { return &bodyReader{Reader: bytes.NewReader(b)} }

// bodyReader is a request body from bytes.
type bodyReader struct{ *bytes.Reader }

func (bodyReader) Close() error { return nil }
