package apicompat

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/husk-vm/husk/imagebuild/builder"
)

// fakeExecs knows the container "running" and no exec instance.
type fakeExecs struct{}

func (fakeExecs) ExecCreate(_ context.Context, ctr string, _ ExecOptions) (string, error) {
	if ctr != "running" {
		return "", errdefs.ErrNotFound.WithMessage("No such container: " + ctr)
	}
	return "exec1", nil
}

func (fakeExecs) ExecStart(_ context.Context, id string, _ ExecStartOptions) error {
	return errdefs.ErrNotFound.WithMessage("No such exec instance: " + id)
}

func (fakeExecs) ExecResize(_ context.Context, id string, _, _ uint) error {
	return errdefs.ErrNotFound.WithMessage("No such exec instance: " + id)
}

func (fakeExecs) ExecInspect(_ context.Context, id string) (container.ExecInspectResponse, error) {
	return container.ExecInspectResponse{}, errdefs.ErrNotFound.WithMessage("No such exec instance: " + id)
}

// fakeNetworks holds the network "taken" and nothing else.
type fakeNetworks struct{}

func (fakeNetworks) Create(_ context.Context, req network.CreateRequest) (network.CreateResponse, error) {
	if req.Name == "taken" {
		return network.CreateResponse{}, errdefs.ErrConflict.WithMessage("network with name taken already exists")
	}
	return network.CreateResponse{ID: "n1"}, nil
}

func (fakeNetworks) List(context.Context, map[string][]string) ([]network.Summary, error) {
	return []network.Summary{}, nil
}

func (fakeNetworks) Inspect(_ context.Context, ref string) (network.Inspect, error) {
	return network.Inspect{}, errdefs.ErrNotFound.WithMessage("network " + ref + " not found")
}

func (fakeNetworks) Remove(_ context.Context, ref string) error {
	return errdefs.ErrNotFound.WithMessage("network " + ref + " not found")
}

func (fakeNetworks) Prune(context.Context, map[string][]string) ([]string, error) { return nil, nil }

func (fakeNetworks) Connect(_ context.Context, ref string, _ network.ConnectRequest) error {
	return errdefs.ErrNotFound.WithMessage("network " + ref + " not found")
}

func (fakeNetworks) Disconnect(_ context.Context, ref string, _ network.DisconnectRequest) error {
	return errdefs.ErrNotFound.WithMessage("network " + ref + " not found")
}

// fakeArchives serves one stat for the container "running" and drains
// uploads.
type fakeArchives struct {
	mu   sync.Mutex
	stat container.PathStat
}

func (f *fakeArchives) ArchiveStat(_ context.Context, ctr, p string) (container.PathStat, error) {
	if ctr != "running" {
		return container.PathStat{}, errdefs.ErrNotFound.WithMessage("No such container: " + ctr)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stat, nil
}

func (f *fakeArchives) ArchiveGet(ctx context.Context, ctr, p string) (container.PathStat, io.ReadCloser, error) {
	st, err := f.ArchiveStat(ctx, ctr, p)
	if err != nil {
		return st, nil, err
	}
	return st, io.NopCloser(strings.NewReader("")), nil
}

func (f *fakeArchives) ArchivePut(ctx context.Context, ctr, p string, _ ArchivePutOptions, r io.Reader) error {
	if _, err := f.ArchiveStat(ctx, ctr, p); err != nil {
		return err
	}
	// A stream the decompressor cannot read is the client's fault.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return errdefs.ErrInvalidArgument.WithMessage("read archive: " + err.Error())
	}
	return nil
}

// quietBuilder builds nothing and succeeds.
type quietBuilder struct{}

func (quietBuilder) Build(_ context.Context, opts builder.BuildOptions, _ builder.Output) (string, error) {
	if _, err := io.Copy(io.Discard, opts.Context); err != nil {
		return "", errdefs.ErrInvalidArgument.WithMessage("read build context: " + err.Error())
	}
	return "sha256:abc", nil
}

// newBadInputServer is an API server with every backend faked; the
// container "running" exists.
func newBadInputServer(t testing.TB, ctrs Containers) (http.Handler, *fakeArchives) {
	t.Helper()
	if ctrs == nil {
		fc := newFakeContainers()
		fc.procs["running"] = &fakeProc{id: strings.Repeat("1", 64), name: "running", cfg: &container.Config{}, running: true, started: make(chan struct{})}
		ctrs = fc
	}
	arch := &fakeArchives{}
	return New(Config{
		Images: &fakeImages{}, Containers: ctrs, System: fakeSystem{},
		Networks: fakeNetworks{}, Volumes: &fakeVolumes{}, Execs: fakeExecs{},
		Archives: arch, Builder: quietBuilder{},
	}), arch
}

// serveRaw sends one request to h and returns the status and the error
// message (the JSON "message", else the plain body).
func serveRaw(h http.Handler, method, target, ctype string, body []byte) (int, string, http.Header) {
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req := httptest.NewRequest(method, "http://docker"+target, rd)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	msg := strings.TrimSpace(rec.Body.String())
	var e struct {
		Message *string `json:"message"`
	}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") && json.Unmarshal(rec.Body.Bytes(), &e) == nil && e.Message != nil {
		msg = *e.Message
	}
	return rec.Code, msg, rec.Header()
}

// TestBadInputDecoders is the request-layer half of e2e's TestBadInput:
// the same decoders and messages (moby v28's, recorded against dockerd in
// e2e), without a daemon.
func TestBadInputDecoders(t *testing.T) {
	h, _ := newBadInputServer(t, nil)
	img := `{"Image":"localhost:5000/a/b:1"}`
	invalidName := func(n string) string {
		return "Invalid container name (" + n + "), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed"
	}
	tests := []struct {
		name, method, path, ctype, body string
		status                          int
		message                         string
	}{
		{"create: truncated JSON", "POST", "/containers/create", "application/json", `{"Image":`, 400, "invalid JSON: unexpected EOF"},
		{"create: not JSON", "POST", "/containers/create", "application/json", `nonsense`, 400, "invalid JSON: invalid character 'o' in literal null (expecting 'u')"},
		{"create: content after JSON", "POST", "/containers/create", "application/json", `{"Image":"a"} {}`, 400, "unexpected content after JSON"},
		{"create: empty body", "POST", "/containers/create", "", "", 400, "invalid JSON: got EOF while reading request body"},
		{"create: null", "POST", "/containers/create", "application/json", `null`, 400, "config cannot be empty in order to create a container"},
		{"create: wrong type", "POST", "/containers/create", "application/json", `{"Image":5}`, 400, "invalid JSON: json: cannot unmarshal number into Go struct field CreateRequest.Config.Image of type string"},
		{"create: unknown field ignored", "POST", "/containers/create", "application/json", `{"Image":"missing","Bogus":1}`, 404, "No such image: missing:latest"},
		{"create: text/plain", "POST", "/containers/create", "text/plain", img, 400, "unsupported Content-Type header (text/plain): must be 'application/json'"},
		{"create: malformed Content-Type", "POST", "/containers/create", "a/b;;", img, 400, "malformed Content-Type header (a/b;;): mime: invalid media parameter"},
		{"create: 8 MiB body", "POST", "/containers/create", "application/json", `{"Image":"missing","Env":["X=` + strings.Repeat("x", 8<<20) + `"]}`, 404, "No such image: missing:latest"},
		{"create: one-letter name", "POST", "/containers/create?name=a", "application/json", img, 400, invalidName("a")},
		{"create: name with a slash", "POST", "/containers/create?name=" + url.QueryEscape("a/b"), "application/json", img, 400, invalidName("a/b")},
		{"create: name starting with a dash", "POST", "/containers/create?name=-ab", "application/json", img, 400, invalidName("-ab")},
		{"create: invalid name, missing image", "POST", "/containers/create?name=a", "application/json", `{"Image":"missing"}`, 404, "No such image: missing"},

		{"exec: truncated JSON", "POST", "/containers/running/exec", "application/json", `{"Cmd":[`, 400, "invalid JSON: unexpected EOF"},
		{"exec: wrong type", "POST", "/containers/running/exec", "application/json", `{"Cmd":5}`, 400, "invalid JSON: json: cannot unmarshal number into Go struct field ExecCreateRequest.Cmd of type []string"},
		{"exec: empty body", "POST", "/containers/running/exec", "", "", 400, "No exec command specified"},
		{"exec: no command, unknown container", "POST", "/containers/nope/exec", "application/json", `{}`, 400, "No exec command specified"},
		{"exec: unknown container", "POST", "/containers/nope/exec", "application/json", `{"Cmd":["true"],"Bogus":1}`, 404, "No such container: nope"},
		{"exec: created", "POST", "/containers/running/exec", "application/json", `{"Cmd":["true"]}`, 201, ""},
		{"exec: unknown exec", "GET", "/exec/nope/json", "", "", 404, "No such exec instance: nope"},
		{"exec start: truncated JSON", "POST", "/exec/nope/start", "application/json", `{`, 400, "invalid JSON: unexpected EOF"},
		{"exec start: content after JSON", "POST", "/exec/nope/start", "application/json", `{} 1`, 400, "unexpected content after JSON"},

		{"network create: truncated JSON", "POST", "/networks/create", "application/json", `{"Name":`, 400, "invalid JSON: unexpected EOF"},
		{"network create: wrong type", "POST", "/networks/create", "application/json", `{"Name":5}`, 400, "invalid JSON: json: cannot unmarshal number into Go struct field CreateRequest.Name of type string"},
		{"network create: empty body", "POST", "/networks/create", "", "", 400, "invalid name: name is empty"},
		{"network create: blank name", "POST", "/networks/create", "application/json", `{"Name":"  "}`, 400, "invalid name: name is empty"},
		{"network create: unparsable addresses", "POST", "/networks/create", "application/json", `{"Name":"n","IPAM":{"Config":[{"Subnet":"10.3.0.0/24","IPRange":"bogus","Gateway":"10.3.0.x","AuxiliaryAddresses":{"b":"x","a":"10.4.0.1"}}]}}`, 400,
			"invalid network config:\n* invalid ip-range bogus: invalid CIDR block notation\n* invalid gateway 10.3.0.x: invalid address\n* invalid auxiliary address a: parent subnet 10.3.0.0/24 doesn't contain this address\n* invalid auxiliary address b: invalid address"},
		{"network create: bad subnet", "POST", "/networks/create", "application/json", `{"Name":"n","IPAM":{"Config":[{"Subnet":"bogus"}]}}`, 400, "invalid network config:\ninvalid subnet bogus: invalid CIDR block notation"},
		{"network create: duplicate, unknown field", "POST", "/networks/create", "application/json", `{"Name":"taken","Bogus":1}`, 409, "network with name taken already exists"},
		{"network connect: truncated JSON", "POST", "/networks/n/connect", "application/json", `{`, 400, "invalid JSON: unexpected EOF"},

		{"volume create: truncated JSON", "POST", "/volumes/create", "application/json", `{"Name":`, 400, "invalid JSON: unexpected EOF"},
		{"volume create: wrong type", "POST", "/volumes/create", "application/json", `{"Name":5}`, 400, "invalid JSON: json: cannot unmarshal number into Go struct field CreateRequest.Name of type string"},
		{"volume create: empty body is anonymous", "POST", "/volumes/create", "", "", 201, ""},

		{"containers: filters not JSON", "GET", "/containers/json?filters=nonsense", "", "", 400, "invalid filter"},
		{"containers: filter value of wrong type", "GET", "/containers/json?filters=" + url.QueryEscape(`{"status":"running"}`), "", "", 400, "invalid filter"},
		{"containers: old filter encoding", "GET", "/containers/json?filters=" + url.QueryEscape(`{"status":{"running":true}}`), "", "", 200, ""},
		{"images: filters not JSON", "GET", "/images/json?filters=nonsense", "", "", 400, "invalid filter"},
		{"networks: filters not JSON", "GET", "/networks?filters=nonsense", "", "", 400, "invalid filter"},
		{"volumes: filters not JSON", "GET", "/volumes?filters=nonsense", "", "", 400, "error reading volume filters: invalid filter"},
		{"container prune: filters not JSON", "POST", "/containers/prune?filters=nonsense", "", "", 400, "invalid filter"},

		{"pull: upper-case name", "POST", "/images/create?fromImage=UPPER", "", "", 400, "invalid reference format: repository name (library/UPPER) must be lowercase"},
		{"pull: malformed reference", "POST", "/images/create?fromImage=" + url.QueryEscape("bad::ref"), "", "", 400, "invalid reference format"},
		{"start: 1 MiB body", "POST", "/containers/running/start", "application/json", `{"x":"` + strings.Repeat("x", 1<<20) + `"}`, 400, "starting container with non-empty request body was deprecated since API v1.22 and removed in v1.24"},
		{"archive: no path", "GET", "/containers/running/archive", "", "", 400, "bad parameter: pathcannot be empty"},
		{"archive: unknown container", "GET", "/containers/nope/archive?path=/", "", "", 404, "No such container: nope"},
		{"build: buildargs not JSON", "POST", "/build?buildargs=nonsense", "application/x-tar", "", 400, "error reading build args: invalid character 'o' in literal null (expecting 'u')"},
		{"build: labels not JSON", "POST", "/build?labels=%7B", "application/x-tar", "", 400, "error reading labels: unexpected end of JSON input"},

		{"version: too old", "GET", "/v1.12/version", "", "", 400, "client version 1.12 is too old. Minimum supported API version is 1.24, please upgrade your client to a newer version"},
		{"version: too new", "GET", "/v9.99/version", "", "", 400, "client version 9.99 is too new. Maximum supported API version is 1.50"},
		{"version: not a number", "GET", "/vx.y/version", "", "", 404, "page not found"},
		{"unknown route", "GET", "/nope", "", "", 404, "page not found"},
		{"wrong method", "PUT", "/containers/create", "", "", 404, "page not found"},
		{"wrong method: DELETE /containers/json", "DELETE", "/containers/json", "", "", 404, "No such container: json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := tt.path
			if !strings.HasPrefix(target, "/v") || strings.HasPrefix(target, "/volumes") {
				target = "/v1.50" + target
			}
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			status, msg, _ := serveRaw(h, tt.method, target, tt.ctype, body)
			if status != tt.status || (status >= 300 && msg != tt.message) {
				t.Errorf("%s %s: %d %q, want %d %q", tt.method, tt.path, status, msg, tt.status, tt.message)
			}
		})
	}
}
