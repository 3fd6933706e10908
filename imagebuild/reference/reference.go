// Package reference turns image references as users type them into the
// normalised names dockerd stores and the short names it shows.
//
// It wraps github.com/distribution/reference, the package dockerd itself
// uses, so "alpine" becomes docker.io/library/alpine:latest, is displayed as
// "alpine:latest", and malformed input fails with dockerd's own wording
// ("invalid reference format"). Conversion to go-containerregistry names for
// registry access lives here too, so both views of a name come from one
// place.
package reference

import (
	"fmt"

	"github.com/containerd/errdefs"
	dref "github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/opencontainers/go-digest"
)

// Named is a normalised repository name with an optional tag or digest.
type Named = dref.Named

// Parse normalises s ("alpine", "localhost:5000/x:1", "x@sha256:…"). It
// does not add a default tag. Errors are errdefs.ErrInvalidArgument with
// dockerd's message.
func Parse(s string) (Named, error) {
	n, err := dref.ParseNormalizedNamed(s)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	return n, nil
}

// ParseWithDefaultTag is Parse plus ":latest" when neither tag nor digest
// was given.
func ParseWithDefaultTag(s string) (Named, error) {
	n, err := Parse(s)
	if err != nil {
		return nil, err
	}
	return dref.TagNameOnly(n), nil
}

// WithTag replaces n's tag (and drops any digest).
func WithTag(n Named, tag string) (Named, error) {
	t, err := dref.WithTag(dref.TrimNamed(n), tag)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	return t, nil
}

// WithDigest returns n's repository at digest d ("sha256:…").
func WithDigest(n Named, d string) (Named, error) {
	dg, err := dref.WithDigest(dref.TrimNamed(n), digest.Digest(d))
	if err != nil {
		return nil, fmt.Errorf("digest reference %s@%s: %w", n.Name(), d, err)
	}
	return dg, nil
}

// Familiar is how docker shows n: "alpine:latest", "localhost:5000/x:1".
func Familiar(n Named) string { return dref.FamiliarString(n) }

// FamiliarName is the repository without tag or digest, as docker shows it.
func FamiliarName(n Named) string { return dref.FamiliarName(n) }

// Path is the repository path inside its registry ("library/alpine"), the
// form dockerd prints in "Pulling from …".
func Path(n Named) string { return dref.Path(n) }

// Domain is the registry host[:port] ("docker.io", "localhost:5000").
func Domain(n Named) string { return dref.Domain(n) }

// Tag is n's tag or "".
func Tag(n Named) string {
	if t, ok := n.(dref.Tagged); ok {
		return t.Tag()
	}
	return ""
}

// Digest is n's digest ("sha256:…") or "".
func Digest(n Named) string {
	if d, ok := n.(dref.Digested); ok {
		return d.Digest().String()
	}
	return ""
}

// IsNameOnly reports whether n has neither tag nor digest.
func IsNameOnly(n Named) bool { return dref.IsNameOnly(n) }

// IsDigested reports whether n names a digest rather than a tag.
func IsDigested(n Named) bool {
	_, ok := n.(dref.Digested)
	return ok
}

// Remote converts n for go-containerregistry. insecure allows plain HTTP.
// ggcr maps docker.io to index.docker.io itself.
func Remote(n Named, insecure bool) (name.Reference, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(n.String(), opts...)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	return r, nil
}
