package apicompat

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/moby/moby/api/types/registry"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// inspectingImages is fakeImages with a registry holding one image.
type inspectingImages struct {
	fakeImages
	ref  string
	auth *registry.AuthConfig
}

func (i *inspectingImages) Distribution(_ context.Context, ref string, auth *registry.AuthConfig) (registry.DistributionInspect, error) {
	i.ref, i.auth = ref, auth
	return registry.DistributionInspect{
		Descriptor: ocispec.Descriptor{MediaType: "application/vnd.docker.distribution.manifest.v2+json", Digest: "sha256:aa", Size: 5},
		Platforms:  []ocispec.Platform{{OS: "linux", Architecture: "amd64"}},
	}, nil
}

// TestInspectDistribution: GET /distribution/{name}/json takes names with
// slashes, ports and digests, passes them normalised with the client's
// credentials, and refuses what names no repository as dockerd does.
func TestInspectDistribution(t *testing.T) {
	imgs := &inspectingImages{}
	srv := httptest.NewServer(New(Config{Images: imgs, Containers: newFakeContainers(), System: fakeSystem{}}))
	t.Cleanup(srv.Close)
	env := &testEnv{srv: srv}
	const id = "0123456789012345678901234567890123456789012345678901234567890123"
	for _, tt := range []struct {
		name, want string
		status     int
		body       string
	}{
		{name: "busybox", want: "docker.io/library/busybox", status: 200,
			body: `{"Descriptor":{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":"sha256:aa","size":5},"Platforms":[{"architecture":"amd64","os":"linux"}]}` + "\n"},
		{name: "127.0.0.1:5000/a/b:1", want: "127.0.0.1:5000/a/b:1", status: 200},
		{name: "a@sha256:" + id, want: "docker.io/library/a@sha256:" + id, status: 200},
		{name: "BAD", status: 400, body: jsonError("invalid reference format: repository name (library/BAD) must be lowercase")},
		{name: id, status: 500, body: jsonError("no manifest found for full image ID")},
		{name: "sha256:" + id, status: 500, body: jsonError("no manifest found for full image ID")},
	} {
		imgs.ref = ""
		r := env.do(t, "GET", "/v1.50/distribution/"+tt.name+"/json", "", http.Header{registry.AuthHeader: {"eyJ1c2VybmFtZSI6InUiLCJwYXNzd29yZCI6InAifQ=="}})
		if r.status != tt.status || tt.body != "" && r.body != tt.body {
			t.Errorf("GET /distribution/%s/json = %d %q, want %d %q", tt.name, r.status, r.body, tt.status, tt.body)
		}
		if imgs.ref != tt.want {
			t.Errorf("GET /distribution/%s/json asked the backend for %q, want %q", tt.name, imgs.ref, tt.want)
		}
		if tt.want != "" && (imgs.auth == nil || imgs.auth.Username != "u") {
			t.Errorf("GET /distribution/%s/json passed credentials %+v", tt.name, imgs.auth)
		}
	}
}
