package apicompat

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/moby/moby/api/types/registry"
)

// searchingImages is fakeImages with an index that records what it was
// asked and answers one repository.
type searchingImages struct {
	fakeImages
	term    string
	limit   int
	filters map[string][]string
	auth    *registry.AuthConfig
	headers http.Header
}

func (s *searchingImages) Search(_ context.Context, term string, limit int, filters map[string][]string, auth *registry.AuthConfig, headers http.Header) ([]registry.SearchResult, error) {
	s.term, s.limit, s.filters, s.auth, s.headers = term, limit, filters, auth, headers
	return []registry.SearchResult{{Name: "foo", StarCount: 3, IsOfficial: true}}, nil
}

// TestSearchImages: GET /images/search parses the limit as dockerd does,
// passes the term, filters, credentials and the client's X-Meta-*
// headers (only those) to the backend, and answers a JSON list.
func TestSearchImages(t *testing.T) {
	imgs := &searchingImages{}
	srv := httptest.NewServer(New(Config{Images: imgs, Containers: newFakeContainers(), System: fakeSystem{}}))
	t.Cleanup(srv.Close)
	env := &testEnv{srv: srv}
	for _, tt := range []struct {
		query  string
		status int
		body   string
		limit  int
	}{
		{"term=foo", 200, `[{"star_count":3,"is_official":true,"name":"foo","is_automated":false,"description":""}]` + "\n", 0},
		{"term=foo&limit=7", 200, "", 7},
		{"term=foo&limit=x", 400, jsonError(`invalid limit specified: strconv.Atoi: parsing "x": invalid syntax`), 0},
		{"term=foo&limit=-1", 400, jsonError("invalid limit specified"), 0},
		{"term=foo&filters=nonsense", 400, jsonError("invalid filter"), 0},
	} {
		imgs.limit = -100
		header := http.Header{"X-Meta-Trace": {"t1"}, "X-Other": {"no"}, registry.AuthHeader: {"eyJ1c2VybmFtZSI6InUiLCJwYXNzd29yZCI6InAifQ=="}}
		r := env.do(t, "GET", "/v1.50/images/search?"+tt.query, "", header)
		if r.status != tt.status || tt.body != "" && r.body != tt.body {
			t.Errorf("GET /images/search?%s = %d %q, want %d %q", tt.query, r.status, r.body, tt.status, tt.body)
		}
		if tt.status != 200 {
			continue
		}
		if imgs.term != "foo" || imgs.limit != tt.limit || imgs.auth == nil || imgs.auth.Username != "u" || imgs.auth.Password != "p" {
			t.Errorf("%s: backend got term %q limit %d auth %+v", tt.query, imgs.term, imgs.limit, imgs.auth)
		}
		if len(imgs.headers) != 1 || imgs.headers.Get("X-Meta-Trace") != "t1" {
			t.Errorf("%s: backend got headers %v, want only X-Meta-Trace", tt.query, imgs.headers)
		}
	}
	plain := httptest.NewServer(New(Config{Images: &fakeImages{}, Containers: newFakeContainers(), System: fakeSystem{}}))
	t.Cleanup(plain.Close)
	if r := (&testEnv{srv: plain}).do(t, "GET", "/v1.50/images/search?term=x", "", nil); r.status != http.StatusNotImplemented {
		t.Errorf("GET /images/search without a backend = %d %s", r.status, r.body)
	}
}
