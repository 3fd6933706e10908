package apicompat

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/system"
)

type testEnv struct {
	srv    *httptest.Server
	ctrs   *fakeContainers
	images *fakeImages
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	env := &testEnv{ctrs: newFakeContainers(), images: &fakeImages{}}
	env.srv = httptest.NewServer(New(Config{Images: env.images, Containers: env.ctrs, System: fakeSystem{}, Version: "0.1.0"}))
	t.Cleanup(env.srv.Close)
	return env
}

type response struct {
	status int
	header http.Header
	body   string
}

func (e *testEnv) do(t *testing.T, method, path, body string, header http.Header) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// create makes a container through the API and returns its ID.
func (e *testEnv) create(t *testing.T, name string, cfg container.Config) string {
	t.Helper()
	b, err := json.Marshal(container.CreateRequest{Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	r := e.do(t, "POST", "/v1.50/containers/create?name="+name, string(b), http.Header{"Content-Type": {"application/json"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create %s: %d %s", name, r.status, r.body)
	}
	var resp container.CreateResponse
	if err := json.Unmarshal([]byte(r.body), &resp); err != nil {
		t.Fatal(err)
	}
	return resp.ID
}

func jsonError(msg string) string {
	b, _ := json.Marshal(map[string]string{"message": msg})
	return string(b) + "\n"
}

var jsonCT = http.Header{"Content-Type": {"application/json"}}

func TestRequests(t *testing.T) {
	env := newTestEnv(t)
	env.create(t, "web", container.Config{Image: "alpine"})
	env.create(t, "running", container.Config{Image: "alpine"})
	env.create(t, "spare", container.Config{Image: "alpine"})
	if r := env.do(t, "POST", "/containers/running/start", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("start: %d %s", r.status, r.body)
	}

	tests := []struct {
		name        string
		method      string
		path        string
		body        string
		header      http.Header
		status      int
		contentType string
		wantBody    string // exact, when set
		bodyPrefix  string
	}{
		{name: "ping", method: "GET", path: "/_ping", status: 200, wantBody: "OK"},
		{name: "versioned ping", method: "GET", path: "/v1.24/_ping", status: 200, wantBody: "OK"},
		{name: "too old", method: "GET", path: "/v1.23/_ping", status: 400, contentType: "text/plain; charset=utf-8",
			wantBody: "client version 1.23 is too old. Minimum supported API version is 1.24, please upgrade your client to a newer version\n"},
		{name: "too new", method: "GET", path: "/v1.51/version", status: 400, contentType: "application/json",
			wantBody: jsonError("client version 1.51 is too new. Maximum supported API version is 1.50")},
		{name: "unknown route", method: "GET", path: "/v1.50/nope", status: 404, contentType: "application/json", wantBody: jsonError("page not found")},
		{name: "unknown unversioned route", method: "GET", path: "/nope/deeper", status: 404, wantBody: jsonError("page not found")},
		{name: "wrong method", method: "GET", path: "/containers/create", status: 404, wantBody: jsonError("page not found")},
		{name: "options", method: "OPTIONS", path: "/anything/at/all", status: 200},
		{name: "plugins", method: "GET", path: "/v1.50/plugins", status: 200, wantBody: "[]\n"},
		{name: "unknown plugin", method: "GET", path: "/v1.50/plugins/vieux/sshfs:latest/json", status: 404,
			wantBody: jsonError(`plugin "vieux/sshfs:latest" not found`)},
		{name: "install plugin", method: "POST", path: "/v1.50/plugins/pull?remote=x", status: 501,
			wantBody: jsonError("plugins are not supported by husk")},
		{name: "swarm services", method: "GET", path: "/v1.50/services", status: 503,
			wantBody: jsonError(`This node is not a swarm manager. Use "docker swarm init" or "docker swarm join" to connect this node to swarm and try again.`)},
		{name: "swarm node", method: "DELETE", path: "/nodes/abc", status: 503,
			wantBody: jsonError(`This node is not a swarm manager. Use "docker swarm init" or "docker swarm join" to connect this node to swarm and try again.`)},
		{name: "swarm leave", method: "POST", path: "/v1.50/swarm/leave", status: 503, wantBody: jsonError("This node is not part of a swarm")},
		{name: "swarm init", method: "POST", path: "/v1.50/swarm/init", status: 501, wantBody: jsonError("swarm mode is not supported by husk")},
		{name: "cluster volume update", method: "PUT", path: "/v1.50/volumes/data?version=1", status: 503,
			wantBody: jsonError("volume update only valid for cluster volumes, but swarm is unavailable")},
		{name: "not a swarm route", method: "GET", path: "/v1.50/nodesx", status: 404, wantBody: jsonError("page not found")},

		{name: "create malformed", method: "POST", path: "/containers/create", body: `{"Image":`, header: jsonCT, status: 400,
			wantBody: jsonError("invalid JSON: unexpected EOF")},
		{name: "create bad syntax", method: "POST", path: "/containers/create", body: `{"Image" "x"}`, header: jsonCT, status: 400,
			wantBody: jsonError("invalid JSON: invalid character '\"' after object key")},
		{name: "create empty body", method: "POST", path: "/containers/create", status: 400,
			wantBody: jsonError("invalid JSON: got EOF while reading request body")},
		{name: "create trailing content", method: "POST", path: "/containers/create", body: `{"Image":"a"} {}`, header: jsonCT, status: 400,
			wantBody: jsonError("unexpected content after JSON")},
		{name: "create wrong content type", method: "POST", path: "/containers/create", body: `{"Image":"a"}`,
			header: http.Header{"Content-Type": {"text/plain"}}, status: 400,
			wantBody: jsonError("unsupported Content-Type header (text/plain): must be 'application/json'")},
		{name: "create no config", method: "POST", path: "/containers/create", body: `{}`, header: jsonCT, status: 400,
			wantBody: jsonError("config cannot be empty in order to create a container")},
		{name: "create bad name", method: "POST", path: "/containers/create?name=a%20b", body: `{"Image":"localhost:5000/a/b:1"}`, header: jsonCT, status: 400,
			wantBody: jsonError("Invalid container name (a b), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed")},
		// dockerd looks the image up before the name.
		{name: "create bad name, missing image", method: "POST", path: "/containers/create?name=a%20b", body: `{"Image":"missing"}`, header: jsonCT, status: 404,
			wantBody: jsonError("No such image: missing")},
		{name: "create missing image", method: "POST", path: "/containers/create", body: `{"Image":"missing"}`, header: jsonCT, status: 404,
			wantBody: jsonError("No such image: missing:latest")},

		{name: "inspect missing", method: "GET", path: "/containers/x/json", status: 404, wantBody: jsonError("No such container: x")},
		{name: "start running", method: "POST", path: "/containers/running/start", status: 304},
		{name: "start with body", method: "POST", path: "/containers/web/start", body: `{"Binds":["/a:/b"]}`, header: jsonCT, status: 400,
			wantBody: jsonError("starting container with non-empty request body was deprecated since API v1.22 and removed in v1.24")},
		{name: "stop not running", method: "POST", path: "/containers/web/stop", status: 304},
		{name: "stop bad timeout", method: "POST", path: "/containers/web/stop?t=soon", status: 400,
			wantBody: jsonError(`strconv.Atoi: parsing "soon": invalid syntax`)},
		{name: "restart stopped", method: "POST", path: "/containers/spare/restart", status: 204},
		{name: "restart missing", method: "POST", path: "/containers/x/restart", status: 404,
			wantBody: jsonError("Cannot restart container x: No such container: x")},
		{name: "kill not running", method: "POST", path: "/containers/web/kill", status: 409,
			bodyPrefix: `{"message":"Cannot kill container: web: container 0000`},
		// dockerd 20.10 reads an unknown condition as not-running.
		{name: "wait unknown condition", method: "POST", path: "/containers/web/wait?condition=bogus", status: 200, contentType: "application/json",
			wantBody: `{"StatusCode":3}` + "\n"},
		{name: "wait not running", method: "POST", path: "/containers/web/wait", status: 200, contentType: "application/json",
			wantBody: `{"StatusCode":3}` + "\n"},
		{name: "resize bad", method: "POST", path: "/containers/web/resize?h=x&w=80", status: 400,
			wantBody: jsonError(`invalid resize height "x": invalid syntax`)},
		{name: "resize negative", method: "POST", path: "/containers/web/resize?h=24&w=-1", status: 400,
			wantBody: jsonError(`invalid resize width "-1": value out of range`)},
		{name: "resize", method: "POST", path: "/containers/web/resize?h=24&w=80", status: 200, wantBody: ""},
		{name: "logs no stream", method: "GET", path: "/containers/web/logs", status: 400,
			wantBody: jsonError("You must choose at least one stream")},
		{name: "logs bad since", method: "GET", path: "/containers/web/logs?stdout=1&since=yesterday", status: 400,
			wantBody: jsonError(`invalid value for "since": invalid timestamp "yesterday": invalid seconds "yesterday": invalid syntax`)},
		{name: "logs missing", method: "GET", path: "/containers/x/logs?stdout=1", status: 404, wantBody: jsonError("No such container: x")},
		{name: "list bad filter", method: "GET", path: "/containers/json?filters=%7Bnope", status: 400, wantBody: jsonError("invalid filter")},
		{name: "list bad limit", method: "GET", path: "/containers/json?limit=many", status: 400,
			wantBody: jsonError(`strconv.Atoi: parsing "many": invalid syntax`)},
		{name: "list empty is array", method: "GET", path: `/containers/json?filters={"status":["none"]}`, status: 200, wantBody: "[]\n"},
		{name: "remove running", method: "DELETE", path: "/containers/running", status: 409,
			wantBody: jsonError("cannot remove container: container is running: stop the container before removing or force remove")},
		{name: "attach missing", method: "POST", path: "/containers/x/attach?stream=1&stdout=1", status: 404,
			wantBody: jsonError("No such container: x")},

		{name: "image inspect slashes", method: "GET", path: "/v1.50/images/localhost:5000/a/b:1/json", status: 200,
			bodyPrefix: `{"Id":"sha256:bb","RepoTags":["localhost:5000/a/b:1"]`},
		{name: "image inspect missing", method: "GET", path: "/images/nope/json", status: 404, wantBody: jsonError("No such image: nope")},
		{name: "image list empty is array", method: "GET", path: "/images/json?all=1", status: 200, wantBody: "[]\n"},
		{name: "image remove", method: "DELETE", path: "/images/localhost:5000/a/b:1?force=1", status: 200,
			wantBody: `[{"Untagged":"localhost:5000/a/b:1"},{"Deleted":"sha256:bb"}]` + "\n"},
		{name: "image remove blank", method: "DELETE", path: "/images/%20", status: 400, wantBody: jsonError("image name cannot be blank")},
		{name: "image tag", method: "POST", path: "/images/alpine/tag?repo=localhost:5000/x&tag=2", status: 201},
		{name: "image tag bad repo", method: "POST", path: "/images/alpine/tag?repo=UPPER", status: 400,
			wantBody: jsonError("invalid reference format: repository name (library/UPPER) must be lowercase")},
		{name: "image tag digest name", method: "POST", path: "/images/alpine/tag?repo=sha256", status: 400,
			wantBody: jsonError("refusing to create an ambiguous tag using digest algorithm as name")},
		{name: "image tag missing", method: "POST", path: "/images/missing/tag?repo=x", status: 404, wantBody: jsonError("No such image: missing:latest")},
		{name: "pull error before progress", method: "POST", path: "/images/create?fromImage=denied&tag=latest", status: 404, contentType: "application/json",
			wantBody: jsonError("pull access denied for denied, repository does not exist or may require 'docker login'")},
		{name: "pull error after progress", method: "POST", path: "/images/create?fromImage=broken&tag=latest", status: 200,
			wantBody: `{"status":"Pulling from library/broken","id":"latest"}` + "\r\n" +
				`{"errorDetail":{"message":"unexpected EOF"},"error":"unexpected EOF"}` + "\r\n"},
		{name: "pull bad reference", method: "POST", path: "/images/create?fromImage=bad!", status: 400, wantBody: jsonError("invalid reference format")},
		{name: "pull scratch", method: "POST", path: "/images/create?fromImage=scratch&tag=latest", status: 403, wantBody: jsonError("'scratch' is a reserved name")},
		{name: "import", method: "POST", path: "/images/create?fromSrc=-&repo=imp&tag=v1&changes=CMD+x", body: "layer", status: 200,
			contentType: "application/json", wantBody: `{"status":"sha256:imported"}` + "\r\n"},
		{name: "import bad repo", method: "POST", path: "/images/create?fromSrc=-&repo=Imp", status: 400,
			wantBody: jsonError("invalid reference format: repository name (library/Imp) must be lowercase")},
		{name: "import digest", method: "POST", path: "/images/create?fromSrc=-&repo=imp@sha256:" + strings.Repeat("0", 64), status: 400,
			wantBody: jsonError("cannot import digest reference")},
		{name: "import bad change", method: "POST", path: "/images/create?fromSrc=-&changes=RUN+x", status: 400,
			wantBody: jsonError("run is not a valid change command")},
		{name: "import not a tar", method: "POST", path: "/images/create?fromSrc=-", body: "bad", status: 500,
			wantBody: jsonError("Error processing tar file: archive/tar: invalid tar header")},
		{name: "save", method: "GET", path: "/images/get?names=a&names=b", status: 200, contentType: "application/x-tar", wantBody: "TAR:a,b"},
		{name: "save one", method: "GET", path: "/images/localhost:5000/a/b:1/get", status: 200, wantBody: "TAR:localhost:5000/a/b:1"},
		{name: "save missing", method: "GET", path: "/images/missing/get", status: 404, wantBody: jsonError("No such image: missing")},
		{name: "save late error", method: "GET", path: "/images/get?names=a&names=late-missing", status: 200,
			wantBody: "TAR:a,late-missing" + `{"errorDetail":{"message":"No such image: late-missing"},"error":"No such image: late-missing"}` + "\r\n"},
		{name: "load", method: "POST", path: "/images/load?quiet=1", body: "tarball", status: 200, contentType: "application/json",
			wantBody: `{"stream":"Loaded image: alpine:latest\n"}` + "\r\n"},
		{name: "load error in band", method: "POST", path: "/images/load", body: "bad", status: 200,
			wantBody: `{"errorDetail":{"message":"invalid archive: no manifest.json"},"error":"invalid archive: no manifest.json"}` + "\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := env.do(t, tc.method, tc.path, tc.body, tc.header)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d (body %q)", r.status, tc.status, r.body)
			}
			if tc.contentType != "" && r.header.Get("Content-Type") != tc.contentType {
				t.Errorf("Content-Type %q, want %q", r.header.Get("Content-Type"), tc.contentType)
			}
			if tc.bodyPrefix != "" {
				if !strings.HasPrefix(r.body, tc.bodyPrefix) {
					t.Errorf("body %q, want prefix %q", r.body, tc.bodyPrefix)
				}
			} else if r.body != tc.wantBody {
				t.Errorf("body %q, want %q", r.body, tc.wantBody)
			}
			for k, want := range map[string]string{"Api-Version": "1.50", "Ostype": "linux", "Docker-Experimental": "true", "Server": "Docker/0.1.0 (linux)"} {
				if got := r.header.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestPingHeaders(t *testing.T) {
	env := newTestEnv(t)
	for _, method := range []string{"GET", "HEAD"} {
		r := env.do(t, method, "/_ping", "", nil)
		want := map[string]string{
			"Builder-Version": "1",
			"Cache-Control":   "no-cache, no-store, must-revalidate",
			"Pragma":          "no-cache",
			"Swarm":           "inactive",
		}
		if method == "HEAD" {
			want["Content-Length"] = "0"
			want["Content-Type"] = "text/plain; charset=utf-8"
		}
		for k, v := range want {
			if got := r.header.Get(k); got != v {
				t.Errorf("%s /_ping: %s = %q, want %q", method, k, got, v)
			}
		}
	}
}

func TestVersionAndInfoDefaults(t *testing.T) {
	env := newTestEnv(t)
	var v system.VersionResponse
	if err := json.Unmarshal([]byte(env.do(t, "GET", "/version", "", nil).body), &v); err != nil {
		t.Fatal(err)
	}
	if v.APIVersion != "1.50" || v.MinAPIVersion != "1.24" || v.Os != "linux" || v.Version != "0.1.0" || v.Platform.Name != "husk" || v.GoVersion == "" {
		t.Errorf("version = %+v", v)
	}
	if len(v.Components) != 1 || v.Components[0].Name != "Engine" || v.Components[0].Details["ApiVersion"] != "1.50" {
		t.Errorf("components = %+v", v.Components)
	}
	var info system.Info
	if err := json.Unmarshal([]byte(env.do(t, "GET", "/info", "", nil).body), &info); err != nil {
		t.Fatal(err)
	}
	if info.ID != "husk-test" || info.Containers != 2 || info.OSType != "linux" || info.ServerVersion != "0.1.0" || info.NCPU == 0 || !info.ExperimentalBuild {
		t.Errorf("info = %+v", info)
	}
}

func TestQueryParsing(t *testing.T) {
	env := newTestEnv(t)
	env.create(t, "web", container.Config{Image: "alpine"})
	tests := []struct {
		name string
		path string
		want any
	}{
		{"filters", `/containers/json?all=1&limit=3&size=true&filters={"label":["a=b","c"],"status":["exited"]}`,
			ContainerListOptions{All: true, Limit: 3, Size: true, Filters: map[string][]string{"label": {"a=b", "c"}, "status": {"exited"}}}},
		{"legacy filters", `/containers/json?all=0&filters={"label":{"c":true,"a=b":true}}`,
			ContainerListOptions{Filters: map[string][]string{"label": {"a=b", "c"}}}},
		{"no filters", `/containers/json`, ContainerListOptions{Filters: map[string][]string{}}},
		{"stop", `/containers/web/stop?t=5&signal=SIGINT`, []any{"SIGINT", ptr(5)}},
		{"stop before 1.42 has no signal", `/v1.41/containers/web/stop?signal=SIGINT`, []any{"", (*int)(nil)}},
		{"wait", `/containers/web/wait?condition=next-exit`, container.WaitConditionNextExit},
		{"remove", `/containers/web?force=1&v=true&link=0`, RemoveOptions{Force: true, RemoveVolumes: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := "GET"
			switch {
			case strings.Contains(tc.path, "/stop"), strings.Contains(tc.path, "/wait"):
				method = "POST"
			case tc.name == "remove":
				method = "DELETE"
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if method == "POST" && strings.Contains(tc.path, "/wait") {
				// The wait blocks until the container exits: only the
				// registration is checked.
				req, _ := http.NewRequestWithContext(ctx, method, env.srv.URL+tc.path, nil)
				resp, err := env.srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			} else {
				env.do(t, method, tc.path, "", nil)
			}
			env.ctrs.mu.Lock()
			got := env.ctrs.lastOpt
			env.ctrs.mu.Unlock()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("backend got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestCreatePassesRequest(t *testing.T) {
	env := newTestEnv(t)
	body := `{"Image":"alpine","Cmd":["echo","hi"],"Tty":true,"NetworkingConfig":{"EndpointsConfig":{"default":{"Aliases":["x"]}}}}`
	r := env.do(t, "POST", "/containers/create?name=/web-1.a_b&platform=linux/amd64", body, jsonCT)
	if r.status != 201 {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	if !strings.Contains(r.body, `"Warnings":[]`) || !strings.HasPrefix(r.body, `{"Id":"`) {
		t.Errorf("body %s", r.body)
	}
	got := env.ctrs.created[0]
	if got.Name != "/web-1.a_b" || got.Platform != "linux/amd64" || got.Config.Image != "alpine" || !got.Config.Tty ||
		!reflect.DeepEqual([]string(got.Config.Cmd), []string{"echo", "hi"}) {
		t.Errorf("request %+v config %+v", got, got.Config)
	}
	if got.HostConfig == nil || got.HostConfig.NetworkMode != "bridge" {
		t.Errorf("host config %+v", got.HostConfig)
	}
	if got.Networking == nil || got.Networking.EndpointsConfig["bridge"] == nil || got.Networking.EndpointsConfig["default"] != nil {
		t.Errorf("networking %+v", got.Networking)
	}
}

func TestPullStream(t *testing.T) {
	env := newTestEnv(t)
	auth := base64.URLEncoding.EncodeToString([]byte(`{"username":"u","password":"p","serveraddress":"localhost:5000"}`))
	r := env.do(t, "POST", "/images/create?fromImage=localhost:5000/a/b&tag=1&platform=linux/amd64", "", http.Header{"X-Registry-Auth": {auth}})
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q", r.status, r.header.Get("Content-Type"))
	}
	lines := strings.Split(strings.TrimSuffix(r.body, "\r\n"), "\r\n")
	if len(lines) != 3 || lines[1] != `{"status":"Downloading","progressDetail":{"current":5,"total":10},"id":"abc"}` {
		t.Errorf("lines %q", lines)
	}
	if env.images.pulled[0] != "localhost:5000/a/b:1" || env.images.platform != "linux/amd64" {
		t.Errorf("pulled %q for %q", env.images.pulled, env.images.platform)
	}
	if a := env.images.auth; a == nil || a.Username != "u" || a.Password != "p" || a.ServerAddress != "localhost:5000" {
		t.Errorf("auth %+v", a)
	}

	for _, header := range []string{"", "e30=", "not base64!"} {
		env.do(t, "POST", "/images/create?fromImage=alpine&tag=latest", "", http.Header{"X-Registry-Auth": {header}})
		if a := env.images.auth; a == nil || a.Username != "" {
			t.Errorf("auth header %q: got %+v, want anonymous", header, a)
		}
	}

	env.do(t, "POST", "/images/create?fromImage=alpine&tag=sha256:"+strings.Repeat("a", 64), "", nil)
	if got := env.images.pulled[len(env.images.pulled)-1]; got != "alpine@sha256:"+strings.Repeat("a", 64) {
		t.Errorf("pull by digest: %q", got)
	}
}

func TestImageTagAndRemoveArgs(t *testing.T) {
	env := newTestEnv(t)
	env.do(t, "POST", "/images/alpine/tag?repo=localhost:5000/x&tag=2", "", nil)
	env.do(t, "POST", "/images/sha256:aa/tag?repo=docker.io/library/busybox", "", nil)
	want := [][3]string{{"alpine", "localhost:5000/x", "2"}, {"sha256:aa", "busybox", "latest"}}
	if !reflect.DeepEqual(env.images.tagged, want) {
		t.Errorf("tagged %q, want %q", env.images.tagged, want)
	}
	env.do(t, "DELETE", "/images/a/b?noprune=1", "", nil)
	env.do(t, "DELETE", "/images/c", "", nil)
	wantRm := []string{"a/b force=false prune=false", "c force=false prune=true"}
	if !reflect.DeepEqual(env.images.removed, wantRm) {
		t.Errorf("removed %q, want %q", env.images.removed, wantRm)
	}
}

// frames splits a stdcopy stream into (stream, payload) pairs.
func frames(t *testing.T, b []byte) [][2]string {
	t.Helper()
	var out [][2]string
	for len(b) > 0 {
		if len(b) < 8 {
			t.Fatalf("short frame header %q", b)
		}
		n := binary.BigEndian.Uint32(b[4:8])
		if len(b) < 8+int(n) {
			t.Fatalf("short frame payload")
		}
		out = append(out, [2]string{[]string{"stdin", "stdout", "stderr", "system"}[b[0]], string(b[8 : 8+n])})
		b = b[8+n:]
	}
	return out
}

func TestLogs(t *testing.T) {
	env := newTestEnv(t)
	env.create(t, "plain", container.Config{Image: "alpine"})
	env.create(t, "tty", container.Config{Image: "alpine", Tty: true})
	t0 := time.Date(2024, 5, 6, 7, 8, 9, 120000000, time.FixedZone("CET", 3600))
	env.ctrs.logs = []LogEntry{
		{Stream: "stdout", Time: t0, Data: []byte("one\ntwo\n")},
		{Stream: "stderr", Time: t0.Add(time.Second), Data: []byte("oops\n")},
	}

	r := env.do(t, "GET", "/containers/plain/logs?stdout=1&stderr=1&timestamps=1&tail=all&since=1700000000.5", "", nil)
	if ct := r.header.Get("Content-Type"); ct != "application/vnd.docker.multiplexed-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	want := [][2]string{
		{"stdout", "2024-05-06T06:08:09.120000000Z one\n"},
		{"stdout", "2024-05-06T06:08:09.120000000Z two\n"},
		{"stderr", "2024-05-06T06:08:10.120000000Z oops\n"},
	}
	if got := frames(t, []byte(r.body)); !reflect.DeepEqual(got, want) {
		t.Errorf("frames %q, want %q", got, want)
	}
	opts := env.ctrs.lastOpt.(LogsOptions)
	if opts.Tail != -1 || !opts.Since.Equal(time.Unix(1700000000, 500000000)) || !opts.Timestamps || !opts.Stdout || !opts.Stderr {
		t.Errorf("options %+v", opts)
	}

	r = env.do(t, "GET", "/containers/plain/logs?stderr=1&tail=1&until=1700000001", "", nil)
	if got := frames(t, []byte(r.body)); !reflect.DeepEqual(got, [][2]string{{"stderr", "oops\n"}}) {
		t.Errorf("stderr only: %q", got)
	}
	if opts := env.ctrs.lastOpt.(LogsOptions); opts.Tail != 1 || !opts.Until.Equal(time.Unix(1700000001, 0)) {
		t.Errorf("options %+v", opts)
	}

	r = env.do(t, "GET", "/containers/tty/logs?stdout=1&stderr=1", "", nil)
	if ct := r.header.Get("Content-Type"); ct != "application/vnd.docker.raw-stream" {
		t.Errorf("tty Content-Type %q", ct)
	}
	if r.body != "one\ntwo\noops\n" {
		t.Errorf("tty body %q", r.body)
	}

	r = env.do(t, "GET", "/v1.41/containers/plain/logs?stdout=1", "", nil)
	if ct := r.header.Get("Content-Type"); ct != "application/vnd.docker.raw-stream" {
		t.Errorf("API 1.41 Content-Type %q", ct)
	}
	if got := frames(t, []byte(r.body)); len(got) != 1 || got[0][1] != "one\ntwo\n" {
		t.Errorf("API 1.41 frames %q", got)
	}
}

func TestMuxWriterFrames(t *testing.T) {
	var buf bytes.Buffer
	var mu = new(sync.Mutex)
	out := muxWriter{mu: mu, w: &buf, stream: stdcopy.Stdout}
	errw := muxWriter{mu: mu, w: &buf, stream: stdcopy.Stderr}
	if n, err := out.Write([]byte("abc")); n != 3 || err != nil {
		t.Fatalf("write: %d %v", n, err)
	}
	if n, err := out.Write(nil); n != 0 || err != nil {
		t.Fatalf("empty write: %d %v", n, err)
	}
	errw.Write([]byte("de"))
	var o, e bytes.Buffer
	if _, err := stdcopy.StdCopy(&o, &e, &buf); err != nil {
		t.Fatal(err)
	}
	if o.String() != "abc" || e.String() != "de" {
		t.Errorf("stdout %q stderr %q", o.String(), e.String())
	}
}

// TestImportDecompresses checks what reaches the image side of an import:
// the body undone of its gzip, and the query as options.
func TestImportDecompresses(t *testing.T) {
	env := newTestEnv(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("the layer"))
	zw.Close()
	r := env.do(t, "POST", "/images/create?fromSrc=-&repo=docker.io/library/imp:v1&message=&changes=CMD+x&changes=ENV+a=b&platform=linux/arm64", gz.String(), nil)
	if r.status != http.StatusOK || r.body != `{"status":"sha256:imported"}`+"\r\n" {
		t.Fatalf("import: %d %q", r.status, r.body)
	}
	want := ImportOptions{Source: "-", Repo: "imp:v1", Message: "the layer", Changes: []string{"CMD x", "ENV a=b"}, Platform: "linux/arm64"}
	if len(env.images.imported) != 1 || !reflect.DeepEqual(env.images.imported[0], want) {
		t.Errorf("imported %+v, want %+v", env.images.imported, want)
	}
}

// TestLegacyImageVirtualSize: clients of API 1.43 and older get an
// image's VirtualSize, its Size, as dockerd gives it them; later ones do
// not.
func TestLegacyImageVirtualSize(t *testing.T) {
	env := newTestEnv(t)
	for _, tc := range []struct {
		path string
		want any
	}{
		{"/v1.41/images/json", 1234.0},
		{"/v1.43/images/localhost:5000/a/b:1/json", 5678.0},
		{"/v1.44/images/json", nil},
		{"/v1.50/images/localhost:5000/a/b:1/json", nil},
	} {
		r := env.do(t, "GET", tc.path, "", nil)
		if r.status != 200 {
			t.Fatalf("%s: status %d: %s", tc.path, r.status, r.body)
		}
		var img map[string]any
		body := strings.TrimSpace(r.body)
		if strings.HasPrefix(body, "[") {
			var list []map[string]any
			if err := json.Unmarshal([]byte(body), &list); err != nil || len(list) != 1 {
				t.Fatalf("%s: %q: %v", tc.path, body, err)
			}
			img = list[0]
		} else if err := json.Unmarshal([]byte(body), &img); err != nil {
			t.Fatalf("%s: %q: %v", tc.path, body, err)
		}
		if img["VirtualSize"] != tc.want || img["Size"] == nil || img["Id"] == nil {
			t.Errorf("%s: VirtualSize %v, Size %v, Id %v; want VirtualSize %v beside the rest", tc.path, img["VirtualSize"], img["Size"], img["Id"], tc.want)
		}
	}
}
