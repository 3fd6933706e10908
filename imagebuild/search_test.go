package imagebuild

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/registry"
)

// TestSplitSearchTerm: a first part that looks like a host names an
// index; anything else is Docker Hub's.
func TestSplitSearchTerm(t *testing.T) {
	for _, tc := range []struct{ term, index, remote string }{
		{"busybox", "docker.io", "busybox"},
		{"library/busybox", "docker.io", "library/busybox"},
		{"user/app", "docker.io", "user/app"},
		{"index.docker.io/user/app", "docker.io", "user/app"},
		{"localhost/app", "localhost", "app"},
		{"reg.example:5000/a/b", "reg.example:5000", "a/b"},
		{"127.0.0.1:5000/a", "127.0.0.1:5000", "a"},
	} {
		if index, remote := splitSearchTerm(tc.term); index != tc.index || remote != tc.remote {
			t.Errorf("splitSearchTerm(%q) = %q, %q; want %q, %q", tc.term, index, remote, tc.index, tc.remote)
		}
	}
}

// TestSearch: a private index on loopback (insecure, so plain HTTP after
// HTTPS fails) is asked for the limit, with the credentials and headers
// given; its answer is filtered, and bad filters, limits and terms are
// refused in dockerd's words before or without a search.
func TestSearch(t *testing.T) {
	var mu sync.Mutex
	var asked []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r)
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/_ping":
			w.Write([]byte("true"))
		case "/v1/search":
			if r.URL.Query().Get("q") == "broken" {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			if r.URL.Query().Get("q") == "garbled" {
				w.Write([]byte("{"))
				return
			}
			json.NewEncoder(w).Encode(registry.SearchResults{Query: "q", Results: []registry.SearchResult{
				{Name: "a", StarCount: 12, IsAutomated: true}, // the index still sends it
				{Name: "b", StarCount: 3000, IsOfficial: true},
				{Name: "c"},
			}})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	s, err := New(Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	names := func(rs []registry.SearchResult) string {
		var out []string
		for _, r := range rs {
			if r.IsAutomated { // deprecated; Search must clear it
				out = append(out, r.Name+"(automated)")
				continue
			}
			out = append(out, r.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name      string
		term      string
		limit     int
		filters   map[string][]string
		want      string // names, or the error
		wantLimit string
		invalid   bool
	}{
		{name: "all", term: host + "/x", want: "a,b,c", wantLimit: "25"},
		{name: "limit", term: host + "/x", limit: 100, want: "a,b,c", wantLimit: "100"},
		{name: "official", term: host + "/x", filters: map[string][]string{"is-official": {"true"}}, want: "b"},
		{name: "not official", term: host + "/x", filters: map[string][]string{"is-official": {"0"}}, want: "a,c"},
		{name: "stars, the highest", term: host + "/x", filters: map[string][]string{"stars": {"1", "12"}}, want: "a,b"},
		{name: "automated", term: host + "/x", filters: map[string][]string{"is-automated": {"true"}}, want: ""},
		{name: "not automated", term: host + "/x", filters: map[string][]string{"is-automated": {"false"}}, want: "a,b,c"},
		{name: "unknown filter", term: host + "/x", filters: map[string][]string{"stars": {"1"}, "bogus": {"1"}}, want: "invalid filter 'bogus'", invalid: true},
		{name: "bad stars", term: host + "/x", filters: map[string][]string{"stars": {"x"}}, want: `invalid filter 'stars=x': strconv.Atoi: parsing "x": invalid syntax`, invalid: true},
		{name: "both truths", term: host + "/x", filters: map[string][]string{"is-official": {"false", "true"}}, want: "invalid filter 'is-official=[false true]'", invalid: true},
		{name: "limit too big", term: host + "/x", limit: 101, want: "limit 101 is outside the range of [1, 100]", invalid: true},
		{name: "scheme", term: "http://" + host + "/x", want: "invalid repository name: repository name (http://" + host + "/x) should not have a scheme", invalid: true},
		{name: "index error", term: host + "/broken", want: "Unexpected status code 502"},
		{name: "garbled answer", term: host + "/garbled", want: "error decoding registry search results: unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			asked = nil
			mu.Unlock()
			auth := &registry.AuthConfig{Username: "u", Password: "p"}
			got, err := s.Search(context.Background(), tc.term, tc.limit, tc.filters, auth, http.Header{"X-Meta-Trace": {"t1"}})
			if err != nil {
				if err.Error() != tc.want || errdefs.IsInvalidArgument(err) != tc.invalid {
					t.Fatalf("Search = %v (invalid argument: %t), want %q (%t)", err, errdefs.IsInvalidArgument(err), tc.want, tc.invalid)
				}
				return
			}
			if names(got) != tc.want {
				t.Errorf("Search = %s, want %s", names(got), tc.want)
			}
			if tc.wantLimit == "" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			// HTTPS reaches the plain server as garbage and gets no
			// answer, so the first request it sees is the HTTP ping.
			if len(asked) != 2 || asked[0].URL.Path != "/v1/_ping" || asked[1].URL.Path != "/v1/search" {
				t.Fatalf("the index was asked %d requests: %v", len(asked), asked)
			}
			q := asked[1]
			if q.URL.Query().Get("n") != tc.wantLimit || q.URL.Query().Get("q") != "x" {
				t.Errorf("search query %s, want q=x n=%s", q.URL.RawQuery, tc.wantLimit)
			}
			if u, p, ok := q.BasicAuth(); !ok || u != "u" || p != "p" || q.Header.Get("X-Docker-Token") != "true" || q.Header.Get("X-Meta-Trace") != "t1" {
				t.Errorf("search headers %v, want basic auth u:p, X-Docker-Token and X-Meta-Trace", q.Header)
			}
			if _, _, ok := asked[0].BasicAuth(); ok {
				t.Error("the ping carried credentials")
			}
		})
	}
}
