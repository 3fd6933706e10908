package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/husk-vm/husk/e2e/harness"
)

// TestSearch: `docker search` against a private index in the suite's
// namespace that speaks the v1 search API (and /v2/ with basic auth, for
// docker login): the daemon pings it over HTTPS, falls back to HTTP as
// the index is on loopback, passes the limit on, filters what it answers,
// and after a login sends the credentials with the search. The index
// answers who asked in each description.
func TestSearch(t *testing.T) {
	requireSuite(t)
	ns := &harness.Netns{Name: suite.Netns, Path: "/var/run/netns/" + suite.Netns}
	var mu sync.Mutex
	var limits []string
	index := http.NewServeMux()
	index.HandleFunc("GET /v1/_ping", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "true") })
	index.HandleFunc("GET /v1/search", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("q")
		mu.Lock()
		limits = append(limits, r.URL.Query().Get("n"))
		mu.Unlock()
		if q == "broken" {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		who := "anonymous"
		if user, _, ok := r.BasicAuth(); ok {
			who = user
		}
		type result struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			Stars       int    `json:"star_count"`
			Official    bool   `json:"is_official"`
			Automated   bool   `json:"is_automated"`
		}
		results := []result{
			{Name: q + "/app", Description: "for " + who + ", a description long enough to be cut short in the table", Stars: 12, Automated: true},
			{Name: q, Description: "official, for " + who, Stars: 3000, Official: true},
			{Name: q + "/tiny", Stars: 0},
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"num_results": len(results), "query": q, "results": results})
	})
	index.HandleFunc("GET /v2/", func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "e2e" || pass != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="husk-e2e"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "{}")
	})
	srv := httptest.NewUnstartedServer(index)
	var closed net.Listener // a port nothing answers on
	if err := ns.Do(func() (err error) {
		if srv.Listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
		closed, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	deadHost := closed.Addr().String()
	closed.Close()
	host := srv.Listener.Addr().String()
	t.Cleanup(func() { docker(t, "logout", host) })

	const format = "{{.Name}}|{{.Description}}|{{.StarCount}}|{{.IsOfficial}}"
	all := func(who string) string {
		return "foo/app|for " + who + ", a description long enough to be cut short in the table|12|\n" +
			"foo|official, for " + who + "|3000|[OK]\nfoo/tiny||0|\n"
	}
	for _, tc := range []struct {
		name      string
		args      []string
		stdin     string
		want      result
		wantLimit string
	}{
		{name: "search", args: []string{"search", "--no-trunc", "--format", format, host + "/foo"}, want: result{Stdout: all("anonymous")}, wantLimit: "25"},
		{name: "official only, limit", args: []string{"search", "--limit", "3", "--filter", "is-official=true", "--format", "{{.Name}} {{.StarCount}} {{.IsOfficial}}", host + "/foo"},
			want: result{Stdout: "foo 3000 [OK]\n"}, wantLimit: "3"},
		{name: "stars", args: []string{"search", "--filter", "stars=12", "--format", "{{.Name}}", host + "/foo"}, want: result{Stdout: "foo/app\nfoo\n"}},
		{name: "index error", args: []string{"search", host + "/broken"}, want: result{Code: 1, Stderr: "Error response from daemon: Unexpected status code 500\n"}},
		{name: "unknown filter", args: []string{"search", "--filter", "bogus=1", host + "/foo"}, want: result{Code: 1, Stderr: "Error response from daemon: " + unknownFilter("bogus") + "\n"}},
		{name: "no index there", args: []string{"search", deadHost + "/foo"}, want: result{Code: 1, Stderr: fmt.Sprintf(
			`Error response from daemon: invalid registry endpoint "http://%[1]s/v1/". HTTPS attempt: Get "https://%[1]s/v1/_ping": dial tcp %[1]s: connect: connection refused. HTTP attempt: Get "http://%[1]s/v1/_ping": dial tcp %[1]s: connect: connection refused`+"\n", deadHost)}},
		{name: "login", args: []string{"login", "-u", "e2e", "--password-stdin", host}, stdin: "s3cret\n", want: result{Stdout: "Login Succeeded\n"}},
		{name: "search with the login", args: []string{"search", "--no-trunc", "--format", format, host + "/foo"}, want: result{Stdout: all("e2e")}},
		{name: "the table", args: []string{"search", "--filter", "is-official=true", host + "/foo"},
			want: result{Stdout: "NAME      DESCRIPTION         STARS     OFFICIAL\nfoo       official, for e2e   3000      [OK]\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			limits = nil
			mu.Unlock()
			got := dockerStdin(t, strings.NewReader(tc.stdin), tc.args...)
			if tc.name == "login" {
				// The CLI warns that the password is stored unencrypted.
				got.Stderr = ""
			}
			if got != tc.want {
				t.Errorf("docker %s = %+v\nwant %+v", strings.Join(tc.args, " "), got, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.wantLimit != "" && (len(limits) != 1 || limits[0] != tc.wantLimit) {
				t.Errorf("the index was asked for %q results, want %s", limits, tc.wantLimit)
			}
		})
	}
}
