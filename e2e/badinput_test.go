package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/husk-vm/husk/e2e/testimages"
)

// answer is the part of an Engine API error that clients act on: the
// status code and the message (the JSON "message", or the whole body when
// the daemon answers in plain text).
type answer struct {
	Status  int
	Message string
}

// badRequest is one row of the bad-input table.
type badRequest struct {
	name   string
	method string
	// path follows the version prefix the docker CLI would negotiate with
	// the daemon; with raw it is the whole path, prefix included.
	path  string
	raw   bool
	body  string
	ctype string // Content-Type; application/json when a body is given and this is ""
	// want is moby v28's answer (API 1.50, what CLI 28.2.2 expects), which
	// huskd gives. For a success status the message is not checked.
	want answer
	// dockerd20, when set, is dockerd 20.10's different answer: the
	// allow-list. Why the two differ is said once, above the rows.
	dockerd20 *answer
	// route names an endpoint this branch of huskd does not serve yet; the
	// row is skipped against huskd while the route answers "page not found".
	route string
}

// badFixture is what the rows refer to.
type badFixture struct {
	img      string // a pulled image
	id, name string // a created (never started) container
	other    string // a second container's name
	network  string // an existing network
	volume   string // an existing volume
	min, max string // the daemon's API version bounds
}

const missingImage = "husk-no-such-image"

// rows is the table. The allow-list (dockerd20) holds the places where
// moby changed its answer between 20.10 (API 1.41) and v28 (API 1.50, the
// docker CLI 28.2.2 this project targets); huskd gives v28's:
//   - every JSON body decoding failure is a 400 "invalid JSON: <decoder
//     error>" (httputils.ReadJSON, runconfig's invalidJSONError); 20.10 gave
//     the bare decoder error, for create and update as a 500, and ignored
//     content after the document;
//   - ReadJSON takes an empty body as "{}": exec create then says "No exec
//     command specified", network create "invalid name: name is empty";
//   - filters.FromJSON answers 400 "invalid filter" for filters it cannot
//     read, where 20.10 passed the JSON error through (mostly as a 500),
//     and "Invalid filter" and "Config cannot be empty" lost their capitals;
//   - the Content-Type check says "unsupported Content-Type header";
//   - image lookups no longer wrap "no such image: X: ...", and a malformed
//     reference is a plain 400; tagging with a malformed repository is a 400,
//     not a 500;
//   - API 1.44 dropped CheckDuplicate: a second network of the same name is
//     a 409, not a 201 with a warning;
//   - errors from checking a create's settings start in lower case
//     ("range of CPUs ...");
//   - distribution/reference v0.6 names the repository in its "must be
//     lowercase" message;
//   - the oldest API served is 1.24 (20.10: 1.12).
//
// The field path in "cannot unmarshal ... into Go struct field T.F of
// type" names each daemon's own Go types (20.10's ContainerConfigWrapper,
// v28's CreateRequest) and depends on the Go release that built it, so it
// is left out of the comparison; the JSON type and the Go type are not.
func (fx badFixture) rows() []badRequest {
	create := func(cfg string) string { return cfg }
	conflict := func(name, id string) string {
		return fmt.Sprintf("Conflict. The container name \"/%s\" is already in use by container \"%s\". You have to remove (or rename) that container to be able to reuse that name.", name, id)
	}
	invalidName := func(n string) string {
		return fmt.Sprintf("Invalid container name (%s), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed", n)
	}
	// distribution/reference v0.6 (in moby v28) names the repository.
	const lowercase = "invalid reference format: repository name (library/UPPER) must be lowercase"
	const lowercase20 = "invalid reference format: repository name must be lowercase"
	imgCfg := fmt.Sprintf(`{"Image":%q}`, fx.img)
	// A body well over what any real client sends: 8 MiB of environment.
	bigEnv := `{"Image":"` + missingImage + `","Env":["X=` + strings.Repeat("x", 8<<20) + `"]}`
	return []badRequest{
		// Container create: malformed and mistyped JSON.
		{name: "create: truncated JSON", method: "POST", path: "/containers/create", body: `{"Image":`,
			want: answer{400, "invalid JSON: unexpected EOF"}, dockerd20: &answer{500, "unexpected EOF"}},
		{name: "create: not JSON", method: "POST", path: "/containers/create", body: `nonsense`,
			want:      answer{400, "invalid JSON: invalid character 'o' in literal null (expecting 'u')"},
			dockerd20: &answer{500, "invalid character 'o' in literal null (expecting 'u')"}},
		{name: "create: content after JSON", method: "POST", path: "/containers/create", body: create(`{"Image":"` + missingImage + `"} {}`),
			want:      answer{400, "unexpected content after JSON"},
			dockerd20: &answer{404, "No such image: " + missingImage + ":latest"}},
		{name: "create: empty body", method: "POST", path: "/containers/create",
			want: answer{400, "invalid JSON: got EOF while reading request body"}, dockerd20: &answer{500, "EOF"}},
		{name: "create: null", method: "POST", path: "/containers/create", body: `null`,
			want:      answer{400, "config cannot be empty in order to create a container"},
			dockerd20: &answer{400, "Config cannot be empty in order to create a container"}},
		{name: "create: wrong type (Image)", method: "POST", path: "/containers/create", body: `{"Image":5}`,
			want:      answer{400, "invalid JSON: json: cannot unmarshal number into Go struct field CreateRequest.Image of type string"},
			dockerd20: &answer{500, "json: cannot unmarshal number into Go struct field ContainerConfigWrapper.Image of type string"}},
		{name: "create: wrong type (HostConfig.Memory)", method: "POST", path: "/containers/create", body: `{"Image":"x","HostConfig":{"Memory":"1g"}}`,
			want:      answer{400, "invalid JSON: json: cannot unmarshal string into Go struct field CreateRequest.HostConfig.Memory of type int64"},
			dockerd20: &answer{500, "json: cannot unmarshal string into Go struct field HostConfig.HostConfig.Memory of type int64"}},
		{name: "create: unknown field ignored", method: "POST", path: "/containers/create", body: `{"Image":"` + missingImage + `","Bogus":1}`,
			want: answer{404, "No such image: " + missingImage + ":latest"}},
		{name: "create: text/plain body", method: "POST", path: "/containers/create", body: imgCfg, ctype: "text/plain",
			want:      answer{400, "unsupported Content-Type header (text/plain): must be 'application/json'"},
			dockerd20: &answer{400, "Content-Type specified (text/plain) must be 'application/json'"}},
		{name: "create: more CPUs than the host has", method: "POST", path: "/containers/create", body: fmt.Sprintf(`{"Image":%q,"HostConfig":{"NanoCPUs":1000000000000000}}`, fx.img),
			want:      answer{400, fmt.Sprintf("range of CPUs is from 0.01 to %[1]d.00, as there are only %[1]d CPUs available", runtime.NumCPU())},
			dockerd20: &answer{400, fmt.Sprintf("Range of CPUs is from 0.01 to %[1]d.00, as there are only %[1]d CPUs available", runtime.NumCPU())}},
		{name: "create: 8 MiB body", method: "POST", path: "/containers/create", body: bigEnv,
			want: answer{404, "No such image: " + missingImage + ":latest"}},

		// Names.
		{name: "create: one-letter name", method: "POST", path: "/containers/create?name=a", body: imgCfg,
			want: answer{400, invalidName("a")}},
		{name: "create: name with a space", method: "POST", path: "/containers/create?name=" + url.QueryEscape("a b"), body: imgCfg,
			want: answer{400, invalidName("a b")}},
		{name: "create: name with a slash", method: "POST", path: "/containers/create?name=" + url.QueryEscape("a/b"), body: imgCfg,
			want: answer{400, invalidName("a/b")}},
		{name: "create: name starting with a dash", method: "POST", path: "/containers/create?name=-ab", body: imgCfg,
			want: answer{400, invalidName("-ab")}},
		{name: "create: duplicate name", method: "POST", path: "/containers/create?name=" + fx.name, body: imgCfg,
			want: answer{409, conflict(fx.name, fx.id)}},
		{name: "create: invalid name, missing image", method: "POST", path: "/containers/create?name=a", body: `{"Image":"` + missingImage + `"}`,
			want: answer{404, "No such image: " + missingImage + ":latest"}},
		{name: "rename: invalid name", method: "POST", path: "/containers/" + fx.name + "/rename?name=" + url.QueryEscape("a b"),
			want: answer{400, "Error when allocating new name: " + invalidName("/a b")}},
		{name: "rename: taken name", method: "POST", path: "/containers/" + fx.name + "/rename?name=" + fx.other,
			want: answer{409, "Error when allocating new name: " + conflict(fx.other, "OTHER")}},
		{name: "rename: unknown container", method: "POST", path: "/containers/husk-nope/rename?name=husk-nope2",
			want: answer{404, "No such container: husk-nope"}},

		// Exec create.
		{name: "exec: truncated JSON", method: "POST", path: "/containers/" + fx.name + "/exec", body: `{"Cmd":[`,
			want: answer{400, "invalid JSON: unexpected EOF"}, dockerd20: &answer{400, "unexpected EOF"}},
		{name: "exec: wrong type (Cmd)", method: "POST", path: "/containers/" + fx.name + "/exec", body: `{"Cmd":5}`,
			want:      answer{400, "invalid JSON: json: cannot unmarshal number into Go struct field ExecOptions.Cmd of type []string"},
			dockerd20: &answer{400, "json: cannot unmarshal number into Go struct field ExecConfig.Cmd of type []string"}},
		{name: "exec: empty body", method: "POST", path: "/containers/" + fx.name + "/exec",
			want: answer{400, "No exec command specified"}, dockerd20: &answer{400, "got EOF while reading request body"}},
		{name: "exec: no command", method: "POST", path: "/containers/" + fx.name + "/exec", body: `{}`,
			want: answer{400, "No exec command specified"}},
		{name: "exec: unknown container", method: "POST", path: "/containers/husk-nope/exec", body: `{"Cmd":["true"]}`,
			want: answer{404, "No such container: husk-nope"}},
		{name: "exec: container not running", method: "POST", path: "/containers/" + fx.name + "/exec", body: `{"Cmd":["true"],"Bogus":1}`,
			want: answer{409, "Container " + fx.id + " is not running"}},
		{name: "exec: unknown exec inspect", method: "GET", path: "/exec/husk-nope/json",
			want: answer{404, "No such exec instance: husk-nope"}},
		{name: "exec: unknown exec start", method: "POST", path: "/exec/husk-nope/start", body: `{"Detach":true}`,
			want: answer{404, "No such exec instance: husk-nope"}},
		{name: "exec: start, truncated JSON", method: "POST", path: "/exec/husk-nope/start", body: `{`,
			want: answer{400, "invalid JSON: unexpected EOF"}, dockerd20: &answer{400, "unexpected EOF"}},

		// Network create.
		{name: "network create: truncated JSON", method: "POST", path: "/networks/create", body: `{"Name":`,
			want: answer{400, "invalid JSON: unexpected EOF"}, dockerd20: &answer{400, "unexpected EOF"}},
		{name: "network create: wrong type", method: "POST", path: "/networks/create", body: `{"Name":5}`,
			want:      answer{400, "invalid JSON: json: cannot unmarshal number into Go struct field CreateRequest.Name of type string"},
			dockerd20: &answer{400, "json: cannot unmarshal number into Go struct field NetworkCreateRequest.Name of type string"}},
		{name: "network create: empty body", method: "POST", path: "/networks/create",
			want: answer{400, "invalid name: name is empty"}, dockerd20: &answer{400, "got EOF while reading request body"}},
		{name: "network create: duplicate, unknown field", method: "POST", path: "/networks/create", body: `{"Name":"` + fx.network + `","Bogus":1}`,
			want: answer{409, "network with name " + fx.network + " already exists"},
			// API 1.44 dropped CheckDuplicate: a duplicate is always refused.
			dockerd20: &answer{201, ""}},
		{name: "network: unknown inspect", method: "GET", path: "/networks/husk-nope",
			want: answer{404, "network husk-nope not found"}},
		{name: "network: unknown remove", method: "DELETE", path: "/networks/husk-nope",
			want: answer{404, "network husk-nope not found"}},

		// Volume create.
		{name: "volume create: truncated JSON", method: "POST", path: "/volumes/create", body: `{"Name":`,
			want: answer{400, "invalid JSON: unexpected EOF"}, dockerd20: &answer{400, "unexpected EOF"}},
		{name: "volume create: wrong type", method: "POST", path: "/volumes/create", body: `{"Name":5}`,
			want:      answer{400, "invalid JSON: json: cannot unmarshal number into Go struct field CreateOptions.Name of type string"},
			dockerd20: &answer{400, "json: cannot unmarshal number into Go struct field VolumeCreateBody.Name of type string"}},
		{name: "volume create: existing, unknown field", method: "POST", path: "/volumes/create", body: `{"Name":"` + fx.volume + `","Bogus":1}`,
			want: answer{201, ""}},
		{name: "volume create: invalid name", method: "POST", path: "/volumes/create", body: `{"Name":"a/b"}`,
			want: answer{400, `create a/b: "a/b" includes invalid characters for a local volume name, only "[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a host directory, use absolute path`}},
		{name: "volume: unknown inspect", method: "GET", path: "/volumes/husk-nope",
			want: answer{404, "get husk-nope: no such volume"}},

		// Container update (another branch adds the route to huskd).
		{name: "update: truncated JSON", method: "POST", path: "/containers/" + fx.name + "/update", body: `{"Memory":`, route: "update",
			want: answer{400, "invalid JSON: unexpected EOF"}, dockerd20: &answer{500, "unexpected EOF"}},
		{name: "update: wrong type", method: "POST", path: "/containers/" + fx.name + "/update", body: `{"Memory":"1g"}`, route: "update",
			want:      answer{400, "invalid JSON: json: cannot unmarshal string into Go struct field UpdateConfig.Memory of type int64"},
			dockerd20: &answer{500, "json: cannot unmarshal string into Go struct field UpdateConfig.Memory of type int64"}},
		{name: "update: unknown container", method: "POST", path: "/containers/husk-nope/update", body: `{}`, route: "update",
			want: answer{404, "No such container: husk-nope"}},

		// Filters.
		{name: "containers: filters not JSON", method: "GET", path: "/containers/json?filters=nonsense",
			want: answer{400, "invalid filter"}, dockerd20: &answer{500, "invalid character 'o' in literal null (expecting 'u')"}},
		{name: "containers: unknown filter", method: "GET", path: "/containers/json?filters=" + url.QueryEscape(`{"bogus":["x"]}`),
			want: answer{400, "invalid filter 'bogus'"}, dockerd20: &answer{400, "Invalid filter 'bogus'"}},
		{name: "containers: filter value of wrong type", method: "GET", path: "/containers/json?filters=" + url.QueryEscape(`{"status":"running"}`),
			want: answer{400, "invalid filter"}, dockerd20: &answer{500, "json: cannot unmarshal string into Go value of type map[string]bool"}},
		{name: "containers: old filter encoding", method: "GET", path: "/containers/json?filters=" + url.QueryEscape(`{"status":{"running":true}}`),
			want: answer{200, ""}},
		{name: "images: filters not JSON", method: "GET", path: "/images/json?filters=nonsense",
			want: answer{400, "invalid filter"}, dockerd20: &answer{500, "invalid character 'o' in literal null (expecting 'u')"}},
		{name: "images: unknown filter", method: "GET", path: "/images/json?filters=" + url.QueryEscape(`{"bogus":["x"]}`),
			want: answer{400, "invalid filter 'bogus'"}, dockerd20: &answer{400, "Invalid filter 'bogus'"}},
		{name: "networks: filters not JSON", method: "GET", path: "/networks?filters=nonsense",
			want: answer{400, "invalid filter"}, dockerd20: &answer{500, "invalid character 'o' in literal null (expecting 'u')"}},
		{name: "volumes: filters not JSON", method: "GET", path: "/volumes?filters=nonsense",
			want:      answer{400, "error reading volume filters: invalid filter"},
			dockerd20: &answer{400, "error reading volume filters: invalid character 'o' in literal null (expecting 'u')"}},
		{name: "events: filters not JSON", method: "GET", path: "/events?until=1&filters=nonsense",
			want: answer{400, "invalid filter"}, dockerd20: &answer{500, "invalid character 'o' in literal null (expecting 'u')"}},
		{name: "container prune: filters not JSON", method: "POST", path: "/containers/prune?filters=nonsense",
			want: answer{400, "invalid filter"}, dockerd20: &answer{400, "invalid character 'o' in literal null (expecting 'u')"}},

		// Unknown objects.
		{name: "container: unknown inspect", method: "GET", path: "/containers/husk-nope/json",
			want: answer{404, "No such container: husk-nope"}},
		{name: "container: unknown start", method: "POST", path: "/containers/husk-nope/start",
			want: answer{404, "No such container: husk-nope"}},
		{name: "container: unknown remove", method: "DELETE", path: "/containers/husk-nope",
			want: answer{404, "No such container: husk-nope"}},
		{name: "image: unknown inspect", method: "GET", path: "/images/husk-nope/json",
			want:      answer{404, "No such image: husk-nope:latest"},
			dockerd20: &answer{404, "no such image: husk-nope: No such image: husk-nope:latest"}},
		{name: "image: unknown remove", method: "DELETE", path: "/images/husk-nope",
			want: answer{404, "No such image: husk-nope:latest"}},

		// Image references.
		{name: "pull: upper-case name", method: "POST", path: "/images/create?fromImage=UPPER",
			want: answer{400, lowercase}, dockerd20: &answer{400, lowercase20}},
		{name: "pull: malformed reference", method: "POST", path: "/images/create?fromImage=" + url.QueryEscape("bad::ref"),
			want: answer{400, "invalid reference format"}},
		{name: "create: upper-case image", method: "POST", path: "/containers/create", body: `{"Image":"UPPER"}`,
			want: answer{400, lowercase}, dockerd20: &answer{400, lowercase20}},
		{name: "image inspect: malformed reference", method: "GET", path: "/images/" + url.PathEscape("bad::ref") + "/json",
			want:      answer{400, "invalid reference format"},
			dockerd20: &answer{400, "no such image: bad::ref: invalid reference format"}},
		{name: "tag: upper-case repository", method: "POST", path: "/images/" + fx.img + "/tag?repo=UPPER",
			want: answer{400, lowercase}, dockerd20: &answer{500, lowercase20}},

		// Bodies where none belongs, or too much of one.
		{name: "start: 1 MiB body", method: "POST", path: "/containers/" + fx.name + "/start", body: `{"x":"` + strings.Repeat("x", 1<<20) + `"}`,
			want: answer{400, "starting container with non-empty request body was deprecated since API v1.22 and removed in v1.24"}},

		// Archives.
		{name: "archive: no path", method: "HEAD", path: "/containers/" + fx.name + "/archive",
			want: answer{400, ""}},
		{name: "archive: no path (GET)", method: "GET", path: "/containers/" + fx.name + "/archive",
			want: answer{400, "bad parameter: pathcannot be empty"}},
		{name: "archive: unknown container", method: "GET", path: "/containers/husk-nope/archive?path=/",
			want: answer{404, "No such container: husk-nope"}},

		// Build query.
		{name: "build: buildargs not JSON", method: "POST", path: "/build?buildargs=nonsense", ctype: "application/x-tar",
			want: answer{400, "error reading build args: invalid character 'o' in literal null (expecting 'u')"}},

		// API versions.
		{name: "version: too old", method: "GET", path: "/v1.11/version", raw: true,
			want: answer{400, fmt.Sprintf("client version 1.11 is too old. Minimum supported API version is %s, please upgrade your client to a newer version", fx.min)}},
		// dockerd 20.10 still serves API 1.12 to 1.23; moby v28 starts at 1.24.
		{name: "version: 1.12", method: "GET", path: "/v1.12/version", raw: true,
			want:      answer{400, "client version 1.12 is too old. Minimum supported API version is 1.24, please upgrade your client to a newer version"},
			dockerd20: &answer{200, ""}},
		{name: "version: too new", method: "GET", path: "/v9.99/version", raw: true,
			want: answer{400, fmt.Sprintf("client version 9.99 is too new. Maximum supported API version is %s", fx.max)}},
		{name: "version: not a number", method: "GET", path: "/vx.y/version", raw: true,
			want: answer{404, "page not found"}},

		// Routes and methods.
		{name: "unknown route", method: "GET", path: "/nope",
			want: answer{404, "page not found"}},
		{name: "unknown route under a container", method: "GET", path: "/containers/" + fx.name + "/nope",
			want: answer{404, "page not found"}},
		{name: "wrong method: PUT /containers/create", method: "PUT", path: "/containers/create",
			want: answer{404, "page not found"}},
		{name: "wrong method: POST /version", method: "POST", path: "/version",
			want: answer{404, "page not found"}},
		{name: "wrong method: DELETE /containers/json", method: "DELETE", path: "/containers/json",
			want: answer{404, "No such container: json"}},
	}
}

// TestBadInput sends malformed, mistyped and hostile requests straight to
// the daemon's socket and checks each answer's status and message against
// the table, which was recorded from dockerd. It logs the whole table.
func TestBadInput(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	other := containerName(t, "-other")
	id := strings.TrimSpace(mustDocker(t, "create", "--name", name, img, "true"))
	otherID := strings.TrimSpace(mustDocker(t, "create", "--name", other, img, "true"))
	network := namePrefix(t) + "-net"
	mustDocker(t, "network", "create", network)
	t.Cleanup(func() {
		// dockerd 20.10 makes a second network of the same name (see the
		// allow-list), so remove by ID.
		ids := strings.Fields(docker(t, "network", "ls", "-q", "--filter", "name=^"+network+"$").Stdout)
		docker(t, append([]string{"network", "rm"}, ids...)...)
	})
	volume := namePrefix(t) + "-vol"
	mustDocker(t, "volume", "create", volume)
	t.Cleanup(func() { docker(t, "volume", "rm", "-f", volume) })

	var ver struct{ APIVersion, MinAPIVersion string }
	if err := json.Unmarshal([]byte(mustDocker(t, "version", "--format", "{{json .Server}}")), &ver); err != nil {
		t.Fatalf("decode docker version: %v", err)
	}
	fx := badFixture{img: img, id: id, name: name, other: other, network: network, volume: volume, min: ver.MinAPIVersion, max: ver.APIVersion}

	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "row\t%s answer\tverdict\n", suite.Kind)
	for _, row := range fx.rows() {
		t.Run(row.name, func(t *testing.T) {
			want := row.want
			if suite.Kind == "dockerd" && row.dockerd20 != nil {
				want = *row.dockerd20
			}
			want.Message = strings.ReplaceAll(want.Message, `"OTHER"`, `"`+otherID+`"`)
			got := sendRaw(t, fx.max, row)
			verdict := "same"
			if row.route != "" && suite.Kind != "dockerd" && got == (answer{404, "page not found"}) {
				fmt.Fprintf(tw, "%s\t%d %q\tskipped\n", row.name, got.Status, clip(got.Message))
				t.Skipf("huskd has no %s route in this branch yet", row.route)
			}
			if got.Status != want.Status || (want.Status >= 300 && goTypes(got.Message) != goTypes(want.Message)) {
				verdict = fmt.Sprintf("DIFF (want %d %q)", want.Status, want.Message)
				t.Errorf("%s %s: got %d %q, want %d %q", row.method, row.path, got.Status, got.Message, want.Status, want.Message)
			} else if row.dockerd20 != nil {
				verdict = "same (allow-listed difference)"
			}
			fmt.Fprintf(tw, "%s\t%d %q\t%s\n", row.name, got.Status, clip(got.Message), verdict)
		})
	}
	tw.Flush()
	t.Logf("bad-input table against %s:\n%s", suite.Kind, table.String())
}

// sendRaw sends one row with the version prefix the CLI would negotiate
// (the daemon's own maximum) and returns the answer.
func sendRaw(t *testing.T, version string, row badRequest) answer {
	t.Helper()
	sock := strings.TrimPrefix(suite.DockerHost, "unix://")
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	path := row.path
	if !row.raw {
		path = "/v" + version + path
	}
	var body io.Reader
	if row.body != "" {
		body = strings.NewReader(row.body)
	}
	req, err := http.NewRequestWithContext(ctx, row.method, "http://docker"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case row.ctype != "":
		req.Header.Set("Content-Type", row.ctype)
	case row.body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", row.method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", row.method, path, err)
	}
	a := answer{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	var e struct {
		Message *string `json:"message"`
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && json.Unmarshal(b, &e) == nil && e.Message != nil {
		a.Message = *e.Message
	}
	t.Logf("%s %s (%d bytes) -> %d %q", row.method, path, len(row.body), a.Status, clip(a.Message))
	return a
}

// goStructField is the field path in encoding/json's type error.
var goStructField = regexp.MustCompile(`Go struct field [A-Za-z0-9_.]+ of type`)

// goTypes replaces the field path a JSON type error names, an
// implementation detail of each daemon, by "F".
func goTypes(msg string) string {
	return goStructField.ReplaceAllString(msg, "Go struct field F of type")
}
