package imagebuild

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/registry"
)

// Search by hand: `docker search` speaks the registry v1 search API
// (GET /v1/search), which Docker Hub still serves and nothing in
// go-containerregistry or distribution's client speaks (they know v2's
// catalog, a different thing). The protocol is two GETs, so it is written
// out here, following dockerd's registry package in behaviour and words.

const (
	hubIndexName       = "docker.io"
	hubSearchEndpoint  = "https://" + indexHostname + "/v1/"
	defaultSearchLimit = 25
)

// searchFilters are the filters GET /images/search accepts.
var searchFilters = []string{"is-automated", "is-official", "stars"}

// Search answers GET /images/search (docker search) as dockerd does:
// term names an index ("host[:port]/name") or Docker Hub ("name"); a
// private index is pinged at /v1/_ping over HTTPS, then plain HTTP when it
// is insecure, and asked for /v1/search. Credentials, when given, go as
// basic auth, as dockerd's v1 client sends them; an identity token alone
// (Docker Hub's OAuth login) is not used. headers are passed on to the
// index (dockerd passes the client's X-Meta-* headers).
func (s *Service) Search(ctx context.Context, term string, limit int, filters map[string][]string, auth *registry.AuthConfig, headers http.Header) ([]registry.SearchResult, error) {
	for _, k := range slices.Sorted(maps.Keys(filters)) {
		if !slices.Contains(searchFilters, k) {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter '%s'", k))
		}
	}
	automated, err := boolFilter(filters, "is-automated")
	if err != nil {
		return nil, err
	}
	if automated != nil && *automated {
		// Docker Hub's is_automated is deprecated and untrustworthy:
		// dockerd reports every result as not automated.
		return []registry.SearchResult{}, nil
	}
	official, err := boolFilter(filters, "is-official")
	if err != nil {
		return nil, err
	}
	minStars := 0
	for _, v := range filters["stars"] {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter 'stars=%s': %v", v, err))
		}
		minStars = max(minStars, n)
	}
	found, err := s.searchIndex(ctx, term, limit, auth, headers)
	if err != nil {
		return nil, err
	}
	out := []registry.SearchResult{}
	for _, r := range found.Results {
		if official != nil && r.IsOfficial != *official {
			continue
		}
		if r.StarCount < minStars {
			continue
		}
		r.IsAutomated = false // deprecated: dockerd clears it rather than pass it on
		out = append(out, r)
	}
	return out, nil
}

// boolFilter is a filter that must hold exactly one truth value ("1",
// "true", "0" or "false"), or nil when it is not given.
func boolFilter(filters map[string][]string, key string) (*bool, error) {
	vs, ok := filters[key]
	if !ok {
		return nil, nil
	}
	isTrue := slices.Contains(vs, "1") || slices.Contains(vs, "true")
	isFalse := slices.Contains(vs, "0") || slices.Contains(vs, "false")
	if isTrue == isFalse {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter '%s=%s'", key, vs))
	}
	return &isTrue, nil
}

// searchIndex asks the index term names for up to limit repositories.
func (s *Service) searchIndex(ctx context.Context, term string, limit int, auth *registry.AuthConfig, headers http.Header) (*registry.SearchResults, error) {
	if strings.Contains(term, "://") {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid repository name: repository name (%s) should not have a scheme", term))
	}
	index, remote := splitSearchTerm(term)
	client := &http.Client{Transport: searchTransport{headers: headers, auth: auth, next: s.searchBaseTransport(index)}}
	endpoint := hubSearchEndpoint
	if index == hubIndexName {
		remote = strings.TrimPrefix(remote, "library/")
	} else {
		var err error
		if endpoint, err = s.pingV1(ctx, client, index); err != nil {
			return nil, err
		}
	}
	if limit == 0 {
		limit = defaultSearchLimit
	}
	if limit < 1 || limit > 100 {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("limit %d is outside the range of [1, 100]", limit))
	}
	u := endpoint + "search?q=" + url.QueryEscape(remote) + "&n=" + strconv.Itoa(limit)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, http.NoBody)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("error building request: %v", err))
	}
	req.Header.Set("X-Docker-Token", "true")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("Unexpected status code %d", resp.StatusCode) // dockerd's words, capital and all
	}
	var found registry.SearchResults
	if err := json.NewDecoder(resp.Body).Decode(&found); err != nil {
		return nil, fmt.Errorf("error decoding registry search results: %w", err)
	}
	return &found, nil
}

// pingV1 finds a private index's v1 endpoint: HTTPS, or plain HTTP for an
// insecure index that HTTPS did not reach. Any answer counts, as in dockerd.
func (s *Service) pingV1(ctx context.Context, client *http.Client, index string) (string, error) {
	ping := func(endpoint string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"_ping", http.NoBody)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	secure := "https://" + index + "/v1/"
	errHTTPS := ping(secure)
	if errHTTPS == nil {
		return secure, nil
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if !s.insecure(index) {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid registry endpoint %s: %v. If this private registry supports only HTTP or HTTPS with an unknown CA certificate, please add `--insecure-registry %s` to the daemon's arguments. In the case of HTTPS, if you have access to the registry's CA certificate, no need for the flag; simply place the CA certificate at /etc/docker/certs.d/%s/ca.crt", secure, errHTTPS, index, index))
	}
	plain := "http://" + index + "/v1/"
	if err := ping(plain); err != nil {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid registry endpoint %q. HTTPS attempt: %v. HTTP attempt: %v", plain, errHTTPS, err))
	}
	return plain, nil
}

// splitSearchTerm parses "host[:port]/name" into the index and the name
// there; a first part that looks like no host means Docker Hub.
func splitSearchTerm(term string) (index, remote string) {
	first, rest, ok := strings.Cut(term, "/")
	if !ok || !strings.ContainsAny(first, ".:") && first != "localhost" {
		return hubIndexName, term
	}
	if first == indexHostname {
		first = hubIndexName
	}
	return first, rest
}

// searchBaseTransport skips certificate checks for an insecure index, as
// dockerd does for HTTPS to one.
func (s *Service) searchBaseTransport(index string) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if index != hubIndexName && s.insecure(index) {
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // the user marked the index insecure
	}
	return t
}

// searchTransport adds what dockerd's v1 client sends: the client's
// X-Meta-* headers, and the credentials as basic auth on the search.
// dockerd sends them to any index, over HTTP too, and so does husk.
type searchTransport struct {
	headers http.Header
	auth    *registry.AuthConfig
	next    http.RoundTripper
}

func (t searchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, vs := range t.headers {
		req.Header[k] = slices.Clone(vs)
	}
	// A redirected request (it has a Referer) goes without credentials.
	if t.auth != nil && t.auth.Username != "" && req.Header.Get("X-Docker-Token") == "true" && req.Header.Get("Authorization") == "" && req.Header.Get("Referer") == "" {
		req.SetBasicAuth(t.auth.Username, t.auth.Password)
	}
	return t.next.RoundTrip(req)
}
