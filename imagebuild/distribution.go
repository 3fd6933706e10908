package imagebuild

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/moby/moby/api/types/registry"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/husk-vm/husk/imagebuild/reference"
)

// Distribution answers GET /distribution/{name}/json (the Go SDK's
// DistributionInspect, docker-py's get_registry_data): the descriptor of
// ref's manifest in its registry and the platforms it offers, without
// pulling. As dockerd reads them, a manifest list or OCI index lists its
// entries' platforms and a Docker image manifest gives its config's; an
// OCI image manifest gives none, since dockerd's distribution client
// knows no platform for one.
func (s *Service) Distribution(ctx context.Context, ref string, auth *registry.AuthConfig) (registry.DistributionInspect, error) {
	named, err := reference.ParseWithDefaultTag(ref)
	if err != nil {
		return registry.DistributionInspect{}, err
	}
	domain := reference.Domain(named)
	rref, err := reference.Remote(named, s.insecure(domain))
	if err != nil {
		return registry.DistributionInspect{}, err
	}
	desc, err := remote.Get(rref, s.remoteOptions(ctx, auth)...)
	if err != nil {
		return registry.DistributionInspect{}, distributionError(ctx, pingError(err, s.insecure(domain)))
	}
	out := registry.DistributionInspect{Descriptor: ocispec.Descriptor{
		MediaType: string(desc.MediaType),
		Digest:    digest.Digest(desc.Digest.String()),
		Size:      desc.Size,
	}}
	switch desc.MediaType {
	case types.DockerManifestList, types.OCIImageIndex:
		idx, err := desc.ImageIndex()
		if err != nil {
			return registry.DistributionInspect{}, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return registry.DistributionInspect{}, err
		}
		for _, m := range im.Manifests {
			var p ocispec.Platform
			if m.Platform != nil {
				p = ocispec.Platform{Architecture: m.Platform.Architecture, OS: m.Platform.OS, OSVersion: m.Platform.OSVersion,
					OSFeatures: m.Platform.OSFeatures, Variant: m.Platform.Variant}
			}
			out.Platforms = append(out.Platforms, p)
		}
	case types.DockerManifestSchema2:
		// A config that cannot be read leaves the platforms out, as in
		// dockerd.
		if img, err := desc.Image(); err == nil {
			if raw, err := img.RawConfigFile(); err == nil {
				var p ocispec.Platform
				if json.Unmarshal(raw, &p) == nil && (p.OS != "" || p.Architecture != "") {
					out.Platforms = append(out.Platforms, p)
				}
			}
		}
	case types.DockerManifestSchema1, types.DockerManifestSchema1Signed:
		return registry.DistributionInspect{}, errdefs.ErrInvalidArgument.WithMessage("Docker Image Format v1 and Docker Image manifest version 2, schema 1 support has been removed. Suggest the author of " +
			named.String() + " to upgrade the image to the OCI Format or Docker Image manifest v2, schema 2. More information at https://docs.docker.com/go/deprecated-image-specs/")
	}
	return out, nil
}

// distributionError gives a registry's refusal in dockerd's words for
// this route: the registry's own error, classed by its HTTP status.
func distributionError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var terr *transport.Error
	if !errors.As(err, &terr) || len(terr.Errors) == 0 {
		return err
	}
	cause := registryCause(terr.Errors[0])
	switch terr.StatusCode {
	case 404:
		return errdefs.ErrNotFound.WithMessage(cause)
	case 401:
		return errdefs.ErrUnauthenticated.WithMessage(cause)
	case 403:
		return errdefs.ErrPermissionDenied.WithMessage(cause)
	}
	return errors.New(cause)
}
