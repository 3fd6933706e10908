package apicompat

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/registry"
	"github.com/opencontainers/go-digest"
)

// createImage is POST /images/create: a pull with fromImage, else an
// import of fromSrc (importImage).
func (s *server) createImage(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	from := r.Form.Get("fromImage")
	if from == "" {
		return s.importImage(ctx, w, r)
	}
	ref, err := pullReference(from, r.Form.Get("tag"))
	if err != nil {
		return err
	}
	// A pull needs no credentials, so dockerd ignores an X-Registry-Auth it
	// cannot decode; Decode already treats "" and "{}" as anonymous.
	auth, _ := authconfig.Decode(r.Header.Get(registry.AuthHeader))

	w.Header().Set("Content-Type", "application/json")
	out := &jsonProgress{w: w}
	err = s.cfg.Images.Pull(ctx, ref, r.Form.Get("platform"), auth, out.message)
	return out.finish(err, false)
}

// pullReference joins fromImage and tag (which may be a digest) as dockerd
// does, and answers the reference in its familiar form ("alpine:3",
// "localhost:5000/x@sha256:...").
func pullReference(from, tag string) (string, error) {
	// "docker pull -a" sends "name:"; dockerd tolerates it.
	ref, err := reference.ParseNormalizedNamed(strings.TrimSuffix(from, ":"))
	if err != nil {
		return "", errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	if tag != "" {
		if dgst, derr := digest.Parse(tag); derr == nil {
			ref, err = reference.WithDigest(reference.TrimNamed(ref), dgst)
		} else {
			ref, err = reference.WithTag(ref, tag)
		}
		if err != nil {
			return "", errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
	}
	if name := reference.FamiliarName(ref); name == "scratch" {
		return "", errdefs.ErrPermissionDenied.WithMessage("'scratch' is a reserved name")
	}
	return reference.FamiliarString(ref), nil
}

func (s *server) listImages(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	filters, err := parseFilters(r)
	if err != nil {
		return err
	}
	// API 1.24 clients send a reference glob as "filter".
	if f := r.Form.Get("filter"); f != "" && versionLess(apiVersion(ctx), "1.25") {
		if _, ok := filters["reference"]; !ok {
			filters["reference"] = []string{f}
		}
	}
	list, err := s.cfg.Images.List(ctx, ImageListOptions{All: boolValue(r, "all"), Filters: filters})
	if err != nil {
		return err
	}
	if list == nil {
		list = []image.Summary{}
	}
	if versionLess(apiVersion(ctx), "1.44") {
		legacy := make([]legacyImageSummary, len(list))
		for i, img := range list {
			legacy[i] = legacyImageSummary{img, img.Size}
		}
		return writeJSON(w, http.StatusOK, legacy)
	}
	return writeJSON(w, http.StatusOK, list)
}

// legacyImageSummary and legacyImageInspect are an image as dockerd shows
// it to clients of API 1.43 and older, whose VirtualSize (the moby types
// dropped it) was the image's Size.
type (
	legacyImageSummary struct {
		image.Summary
		VirtualSize int64
	}
	legacyImageInspect struct {
		image.InspectResponse
		VirtualSize int64
	}
)

func (s *server) inspectImage(ctx context.Context, w http.ResponseWriter, _ *http.Request, vars map[string]string) error {
	resp, err := s.cfg.Images.Inspect(ctx, vars["name"])
	if err != nil {
		return err
	}
	if versionLess(apiVersion(ctx), "1.44") {
		return writeJSON(w, http.StatusOK, legacyImageInspect{resp, resp.Size})
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (s *server) tagImage(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	repo, tag, err := tagReference(r.Form.Get("repo"), r.Form.Get("tag"))
	if err != nil {
		return err
	}
	if err := s.cfg.Images.Tag(ctx, vars["name"], repo, tag); err != nil {
		return err
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

// tagReference validates repo and tag as dockerd's RepoTagReference does,
// with "latest" for a missing tag, and answers the familiar repository name.
func tagReference(repo, tag string) (string, string, error) {
	invalid := func(err error) error { return errdefs.ErrInvalidArgument.WithMessage(err.Error()) }
	ref, err := reference.ParseNormalizedNamed(repo)
	if err != nil {
		return "", "", invalid(err)
	}
	if _, ok := ref.(reference.Digested); ok {
		return "", "", invalid(errors.New("cannot import digest reference"))
	}
	if tag == "" {
		if tagged, ok := ref.(reference.Tagged); ok {
			tag = tagged.Tag()
		} else {
			tag = "latest"
		}
	}
	tagged, err := reference.WithTag(reference.TrimNamed(ref), tag)
	if err != nil {
		return "", "", invalid(err)
	}
	name := reference.FamiliarName(tagged)
	if name == string(digest.Canonical) {
		return "", "", invalid(errors.New("refusing to create an ambiguous tag using digest algorithm as name"))
	}
	return name, tag, nil
}

func (s *server) removeImage(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	name := vars["name"]
	if strings.TrimSpace(name) == "" {
		return errdefs.ErrInvalidArgument.WithMessage("image name cannot be blank")
	}
	list, err := s.cfg.Images.Remove(ctx, name, boolValue(r, "force"), !boolValue(r, "noprune"))
	if err != nil {
		return err
	}
	if list == nil {
		list = []image.DeleteResponse{}
	}
	return writeJSON(w, http.StatusOK, list)
}

// saveImages is GET /images/{name}/get and GET /images/get?names=...
func (s *server) saveImages(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	names := r.Form["names"]
	if name, ok := vars["name"]; ok {
		names = []string{name}
	}
	w.Header().Set("Content-Type", "application/x-tar")
	out := &countingWriter{w: flushWriter{w: w}}
	err := s.cfg.Images.Save(ctx, names, out)
	if err == nil || out.n == 0 {
		return err
	}
	// Like dockerd: the archive is already under way, so the error goes
	// into it as a JSON line, which at least makes the tar unreadable
	// rather than silently short.
	progress := &jsonProgress{w: w, started: true}
	return progress.finish(err, true)
}

// loadImages is POST /images/load. dockerd always answers 200 and reports
// a failure inside the JSON stream, even before the first message.
func (s *server) loadImages(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	out := &jsonProgress{w: w}
	err := s.cfg.Images.Load(ctx, r.Body, out.message)
	return out.finish(err, true)
}

// countingWriter counts what went through, to tell whether an answer
// has started.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
