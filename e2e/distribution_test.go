package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/husk-vm/husk/e2e/testimages"
)

// TestDistributionInspect: the Go SDK's DistributionInspect (docker-py's
// get_registry_data) reads an image's manifest descriptor and platforms
// from the registry without pulling: a Docker manifest list lists its
// entries' platforms, a Docker image manifest its config's; by digest
// too. An unknown tag is the registry's not-found, and an image ID names
// nothing in a registry.
func TestDistributionInspect(t *testing.T) {
	requireSuite(t)
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	c := goClient(t)
	amd64 := ocispec.Platform{OS: "linux", Architecture: "amd64"}
	for _, tc := range []struct {
		ref, mediaType, digest string
		platforms              []ocispec.Platform
	}{
		{ref(testimages.Busybox), "application/vnd.docker.distribution.manifest.v2+json", suite.Digests[testimages.Busybox], []ocispec.Platform{amd64}},
		{suite.Registry + "/" + testimages.Busybox + "@" + suite.Digests[testimages.Busybox], "application/vnd.docker.distribution.manifest.v2+json", suite.Digests[testimages.Busybox], []ocispec.Platform{amd64}},
		{ref(testimages.MultiArch), "application/vnd.docker.distribution.manifest.list.v2+json", suite.Digests[testimages.MultiArch],
			[]ocispec.Platform{amd64, {OS: "linux", Architecture: "arm64", Variant: "v8"}}},
	} {
		res, err := c.DistributionInspect(ctx, tc.ref, client.DistributionInspectOptions{})
		if err != nil {
			t.Errorf("DistributionInspect %s: %v", tc.ref, err)
			continue
		}
		d := res.Descriptor
		if d.MediaType != tc.mediaType || d.Digest.String() != tc.digest || d.Size <= 0 {
			t.Errorf("DistributionInspect %s: descriptor %+v, want %s %s", tc.ref, d, tc.mediaType, tc.digest)
		}
		if got, want := fmt.Sprint(res.Platforms), fmt.Sprint(tc.platforms); got != want {
			t.Errorf("DistributionInspect %s: platforms %s, want %s", tc.ref, got, want)
		}
	}
	_, err := c.DistributionInspect(ctx, suite.Registry+"/husk/nope:latest", client.DistributionInspectOptions{})
	if !cerrdefs.IsNotFound(err) || !strings.Contains(err.Error(), "manifest unknown: manifest unknown") {
		t.Errorf("DistributionInspect of an unknown tag: %v, want the registry's manifest unknown as not found", err)
	}
	_, err = c.DistributionInspect(ctx, "0123456789012345678901234567890123456789012345678901234567890123", client.DistributionInspectOptions{})
	if err == nil || !strings.Contains(err.Error(), "no manifest found for full image ID") {
		t.Errorf("DistributionInspect of an image ID: %v, want dockerd's refusal", err)
	}
}
