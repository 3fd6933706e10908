package imagebuild

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestDistribution: what GET /distribution/{name}/json answers for each
// kind of manifest, read as dockerd reads them, and for a tag the
// registry does not have.
func TestDistribution(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	withPlatform := func(img v1.Image, os, arch, variant string) v1.Image {
		t.Helper()
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf.OS, cf.Architecture, cf.Variant = os, arch, variant
		img, err = mutate.ConfigFile(img, cf)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	docker := withPlatform(mutate.MediaType(img, types.DockerManifestSchema2), "linux", "amd64", "")
	oci := withPlatform(mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON), "linux", "amd64", "")
	arm := withPlatform(mutate.MediaType(img, types.DockerManifestSchema2), "linux", "arm64", "v8")
	list := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.DockerManifestList),
		mutate.IndexAddendum{Add: docker, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}})
	// An OCI index entry without a platform is listed as an empty one.
	index := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: oci, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: oci})
	push := func(repo string, w func(name.Reference) error) string {
		t.Helper()
		ref, err := name.ParseReference(host+"/"+repo, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := w(ref); err != nil {
			t.Fatalf("push %s: %v", repo, err)
		}
		return ref.String()
	}
	refs := map[string]string{
		"docker": push("docker:1", func(r name.Reference) error { return remote.Write(r, docker) }),
		"oci":    push("oci:1", func(r name.Reference) error { return remote.Write(r, oci) }),
		"list":   push("list:1", func(r name.Reference) error { return remote.WriteIndex(r, list) }),
		"index":  push("index:1", func(r name.Reference) error { return remote.WriteIndex(r, index) }),
	}
	dockerDigest, err := docker.Digest()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref, mediaType, platforms string
	}{
		{refs["docker"], string(types.DockerManifestSchema2), "[{amd64 linux  [] }]"},
		{host + "/docker@" + dockerDigest.String(), string(types.DockerManifestSchema2), "[{amd64 linux  [] }]"},
		{refs["oci"], string(types.OCIManifestSchema1), "[]"},
		{refs["list"], string(types.DockerManifestList), "[{amd64 linux  [] } {arm64 linux  [] v8}]"},
		{refs["index"], string(types.OCIImageIndex), "[{amd64 linux  [] } {   [] }]"},
	} {
		got, err := s.Distribution(context.Background(), tc.ref, nil)
		if err != nil {
			t.Errorf("Distribution %s: %v", tc.ref, err)
			continue
		}
		if got.Descriptor.MediaType != tc.mediaType || !strings.HasPrefix(got.Descriptor.Digest.String(), "sha256:") || got.Descriptor.Size <= 0 {
			t.Errorf("Distribution %s: descriptor %+v, want %s", tc.ref, got.Descriptor, tc.mediaType)
		}
		if p := fmt.Sprint(got.Platforms); p != tc.platforms {
			t.Errorf("Distribution %s: platforms %s, want %s", tc.ref, p, tc.platforms)
		}
	}
	_, err = s.Distribution(context.Background(), host+"/docker:2", nil)
	if !errdefs.IsNotFound(err) || err.Error() != "manifest unknown: Unknown manifest" {
		t.Errorf("Distribution of an unknown tag: %v, want the registry's words as not found", err)
	}
}
