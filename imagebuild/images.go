package imagebuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	"github.com/moby/moby/api/types/image"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/husk-vm/husk/imagebuild/reference"
	"github.com/husk-vm/husk/runtime/timestamp"
)

var acceptedListFilters = map[string]bool{
	"dangling": true, "label": true, "before": true, "since": true, "reference": true, "until": true,
}

// List is GET /images/json. Filters: dangling, reference, label, before,
// since, until, as dockerd applies them.
func (s *Service) List(ctx context.Context, all bool, filters map[string][]string) ([]image.Summary, error) {
	for k := range filters {
		if !acceptedListFilters[k] {
			return nil, errdefs.ErrInvalidArgument.WithMessage("invalid filter '" + k + "'")
		}
	}
	dangling, hasDangling := filters["dangling"]
	danglingOnly := false
	if hasDangling {
		// As dockerd's GetBoolOrDefault: true or false, not both.
		isTrue := slices.Contains(dangling, "true") || slices.Contains(dangling, "1")
		isFalse := slices.Contains(dangling, "false") || slices.Contains(dangling, "0")
		if isTrue == isFalse {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter 'dangling=%v'", dangling))
		}
		danglingOnly = isTrue
	}
	refPatterns, hasRef := filters["reference"]

	s.mu.Lock()
	defer s.mu.Unlock()

	var before, since time.Time
	for _, v := range filters["before"] {
		r, err := s.resolveLocked(v)
		if err != nil {
			return nil, err
		}
		if c := r.config.Created.Time; before.IsZero() || before.After(c) {
			before = c
		}
	}
	for _, v := range filters["until"] {
		t, err := timestamp.Parse(v, time.Now())
		if err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid value for 'until' filter: %v", err))
		}
		if before.IsZero() || before.After(t) {
			before = t
		}
	}
	for _, v := range filters["since"] {
		r, err := s.resolveLocked(v)
		if err != nil {
			return nil, err
		}
		if c := r.config.Created.Time; since.Before(c) {
			since = c
		}
	}

	parents := s.parentsLocked()
	out := []image.Summary{}
	for id, r := range s.images {
		created := r.config.Created.Time
		if !before.IsZero() && !created.Before(before) {
			continue
		}
		if !since.IsZero() && !created.After(since) {
			continue
		}
		if labels, ok := filters["label"]; ok && !matchLabels(labels, r.config.Config.Labels) {
			continue
		}
		sum := image.Summary{
			ID:          id,
			Created:     created.Unix(),
			Size:        r.Size,
			SharedSize:  -1,
			Containers:  -1,
			Labels:      r.config.Config.Labels,
			RepoTags:    []string{},
			RepoDigests: []string{},
		}
		for _, ref := range s.sortedRefsLocked(id) {
			if hasRef && !matchReference(refPatterns, ref) {
				continue
			}
			if reference.IsDigested(ref) {
				sum.RepoDigests = append(sum.RepoDigests, reference.Familiar(ref))
			} else {
				sum.RepoTags = append(sum.RepoTags, reference.Familiar(ref))
			}
		}
		if len(sum.RepoTags) == 0 && len(sum.RepoDigests) == 0 {
			if (hasDangling && !danglingOnly) || hasRef {
				continue
			}
			// As dockerd: a build's intermediate images show only with -a.
			if !all && parents[id] {
				continue
			}
		} else if danglingOnly && len(sum.RepoTags) > 0 {
			continue
		}
		out = append(out, sum)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Created != out[j].Created {
			return out[i].Created > out[j].Created
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// sortedRefsLocked returns the references to id, ordered by their
// familiar form as dockerd's reference store orders them.
func (s *Service) sortedRefsLocked(id string) []reference.Named {
	var refs []reference.Named
	for k, target := range s.refs {
		if target != id {
			continue
		}
		if n, err := reference.Parse(k); err == nil {
			refs = append(refs, n)
		}
	}
	sort.Slice(refs, func(i, j int) bool { return reference.Familiar(refs[i]) < reference.Familiar(refs[j]) })
	return refs
}

func matchReference(patterns []string, ref reference.Named) bool {
	targets := []string{reference.Familiar(ref), reference.FamiliarName(ref), ref.String(), ref.Name()}
	for _, p := range patterns {
		for _, t := range targets {
			if ok, _ := path.Match(p, t); ok {
				return true
			}
		}
	}
	return false
}

// matchLabels accepts "key" (present) and "key=value" filters; all must
// match.
func matchLabels(filters []string, labels map[string]string) bool {
	for _, f := range filters {
		k, v, hasValue := strings.Cut(f, "=")
		got, ok := labels[k]
		if !ok || (hasValue && got != v) {
			return false
		}
	}
	return true
}

// Inspect is GET /images/{name}/json.
func (s *Service) Inspect(ctx context.Context, ref string) (image.InspectResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.resolveLocked(ref)
	if err != nil {
		return image.InspectResponse{}, err
	}
	cfg := r.config
	tags, digests := s.refsOfLocked(r.ID)
	comment := ""
	if n := len(cfg.History); n > 0 {
		comment = cfg.History[n-1].Comment
	}
	created := ""
	if !cfg.Created.IsZero() {
		created = cfg.Created.Time.Format(time.RFC3339Nano)
	}
	layers := make([]string, 0, len(cfg.RootFS.DiffIDs))
	for _, d := range cfg.RootFS.DiffIDs {
		layers = append(layers, d.String())
	}
	imgCfg := dockerImageConfig(cfg.Config)
	return image.InspectResponse{
		ID:           r.ID,
		RepoTags:     tags,
		RepoDigests:  digests,
		Comment:      comment,
		Created:      created,
		Author:       cfg.Author,
		Config:       &imgCfg,
		Architecture: cfg.Architecture,
		Variant:      cfg.Variant,
		Os:           cfg.OS,
		OsVersion:    cfg.OSVersion,
		Size:         r.Size,
		RootFS:       image.RootFS{Type: cfg.RootFS.Type, Layers: layers},
		Metadata:     image.Metadata{LastTagTime: r.LastTagTime},
	}, nil
}

// dockerImageConfig is the image config in the shape dockerd 1.50 returns.
func dockerImageConfig(c v1.Config) dockerspec.DockerOCIImageConfig {
	out := dockerspec.DockerOCIImageConfig{
		ImageConfig: ocispec.ImageConfig{
			User:         c.User,
			ExposedPorts: c.ExposedPorts,
			Env:          c.Env,
			Entrypoint:   c.Entrypoint,
			Cmd:          c.Cmd,
			Volumes:      c.Volumes,
			WorkingDir:   c.WorkingDir,
			Labels:       c.Labels,
			StopSignal:   c.StopSignal,
			ArgsEscaped:  c.ArgsEscaped,
		},
		DockerOCIImageConfigExt: dockerspec.DockerOCIImageConfigExt{
			OnBuild: c.OnBuild,
			Shell:   c.Shell,
		},
	}
	if len(out.ExposedPorts) == 0 {
		out.ExposedPorts = nil
	}
	if h := c.Healthcheck; h != nil {
		out.Healthcheck = &dockerspec.HealthcheckConfig{
			Test:        h.Test,
			Interval:    h.Interval,
			Timeout:     h.Timeout,
			StartPeriod: h.StartPeriod,
			Retries:     h.Retries,
		}
	}
	return out
}

// Tag is POST /images/{name}/tag: repo[:tag] (tag defaulting to latest)
// points at source's image afterwards.
func (s *Service) Tag(ctx context.Context, source, repo, tag string) error {
	named, err := reference.Parse(repo)
	if err != nil {
		return err
	}
	if reference.IsDigested(named) {
		return errdefs.ErrInvalidArgument.WithMessage("refusing to create a tag with a digest reference")
	}
	if tag == "" {
		tag = reference.Tag(named)
	}
	if tag == "" {
		tag = "latest"
	}
	if named, err = reference.WithTag(named, tag); err != nil {
		return err
	}
	if reference.Path(named) == "sha256" {
		return errdefs.ErrInvalidArgument.WithMessage("refusing to create an ambiguous tag using digest algorithm as name")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.resolveLocked(source)
	if err != nil {
		return err
	}
	r.LastTagTime = time.Now().UTC()
	if err := s.saveRecordLocked(r); err != nil {
		return err
	}
	s.refs[named.String()] = r.ID
	return s.saveRefsLocked()
}

// Remove is DELETE /images/{name}, following dockerd's untag-then-delete
// rules: dependent child images and running containers are conflicts
// force does not override, other references and stopped containers
// (InUse's users that Running does not list) ones it does.
func (s *Service) Remove(ctx context.Context, ref string, force, prune bool) ([]image.DeleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.resolveLocked(ref)
	if err != nil {
		return nil, err
	}
	id := r.ID
	var users []string
	if s.opts.InUse != nil {
		users = s.opts.InUse(id)
	}
	// What keeps the image even from a forced removal does not change
	// with the untagging below.
	hard := s.hardConflictLocked(id)
	records := []image.DeleteResponse{}
	repoRefs := s.sortedRefsLocked(id)
	quiet := false

	if !isImageIDPrefix(id, ref) {
		if !force && isSingleReference(repoRefs) && len(users) > 0 {
			return nil, errdefs.ErrConflict.WithMessage(fmt.Sprintf(
				"conflict: unable to remove repository reference %q (must force) - container %s is using its referenced image %s",
				ref, shortID(users[0]), shortID(id)))
		}
		parsed, err := reference.ParseWithDefaultTag(ref)
		if err != nil {
			return nil, err
		}
		delete(s.refs, parsed.String())
		records = append(records, image.DeleteResponse{Untagged: reference.Familiar(parsed)})
		repoRefs = s.sortedRefsLocked(id)

		// Removing the last tag of a repository also drops that
		// repository's digest references.
		if !reference.IsDigested(parsed) {
			tagLeft := false
			for _, rr := range repoRefs {
				if !reference.IsDigested(rr) && rr.Name() == parsed.Name() {
					tagLeft = true
					break
				}
			}
			if !tagLeft {
				var remaining []reference.Named
				for _, rr := range repoRefs {
					if reference.IsDigested(rr) && rr.Name() == parsed.Name() {
						delete(s.refs, rr.String())
						records = append(records, image.DeleteResponse{Untagged: reference.Familiar(rr)})
					} else {
						remaining = append(remaining, rr)
					}
				}
				repoRefs = remaining
			}
		}
		if len(repoRefs) > 0 {
			return records, s.saveRefsLocked()
		}
		quiet = true
	} else if isSingleReference(repoRefs) {
		if hard != nil {
			return nil, hard
		}
		if !force && len(users) > 0 {
			return nil, deleteConflict(id, "image is being used by stopped container "+shortID(users[0]))
		}
		for _, rr := range repoRefs {
			delete(s.refs, rr.String())
			records = append(records, image.DeleteResponse{Untagged: reference.Familiar(rr)})
		}
	}

	conflict := hard
	if conflict == nil && !force {
		switch {
		case len(s.sortedRefsLocked(id)) > 0:
			conflict = deleteConflict(id, "image is referenced in multiple repositories")
		case len(users) > 0:
			conflict = deleteConflict(id, "image is being used by stopped container "+shortID(users[0]))
		}
	}
	if conflict != nil {
		// After an untag dockerd keeps a still-used image quietly.
		if quiet {
			return records, s.saveRefsLocked()
		}
		return nil, conflict
	}

	for _, rr := range s.sortedRefsLocked(id) {
		delete(s.refs, rr.String())
		records = append(records, image.DeleteResponse{Untagged: reference.Familiar(rr)})
	}
	if err := s.saveRefsLocked(); err != nil {
		return nil, err
	}
	if err := os.Remove(s.recordPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove image record %s: %w", id, err)
	}
	delete(s.images, id)
	records = append(records, image.DeleteResponse{Deleted: id})
	for _, chain := range s.releaseLayersLocked(r) {
		records = append(records, image.DeleteResponse{Deleted: chain})
	}
	if prune {
		records = append(records, s.pruneParentsLocked(r.Parent)...)
	}
	return records, nil
}

func deleteConflict(id, msg string) error {
	return errdefs.ErrConflict.WithMessage(fmt.Sprintf("conflict: unable to delete %s (must be forced) - %s", shortID(id), msg))
}

// hardConflictLocked is what keeps image id even from a forced removal,
// in dockerd's order: images built on it, then a running container.
func (s *Service) hardConflictLocked(id string) error {
	hard := func(msg string) error {
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("conflict: unable to delete %s (cannot be forced) - %s", shortID(id), msg))
	}
	if s.parentsLocked()[id] {
		return hard("image has dependent child images")
	}
	if s.opts.Running != nil {
		if running := s.opts.Running(id); len(running) > 0 {
			return hard("image is being used by running container " + shortID(running[0]))
		}
	}
	return nil
}

// releaseLayersLocked deletes the blobs of a removed image that no other
// image (and no in-flight pull or load) needs, and returns the chain IDs of
// its layers no remaining image shares, top layer first, which is what
// dockerd reports as deleted. Caller holds s.mu and has already removed r
// from s.images.
func (s *Service) releaseLayersLocked(r *record) []string {
	needed := s.neededLocked()
	chains := map[string]bool{}
	for _, o := range s.images {
		for _, c := range chainIDs(o.config.RootFS.DiffIDs) {
			chains[c] = true
		}
	}
	candidates := []v1.Hash{r.Manifest}
	if h, err := v1.NewHash(r.ID); err == nil {
		candidates = append(candidates, h)
	}
	for _, l := range r.Layers {
		candidates = append(candidates, l.Digest)
	}
	for _, h := range candidates {
		if needed[h] {
			continue
		}
		if err := s.blobs.Delete(h); err != nil {
			s.log.Warn("could not delete unused blob", "digest", h, "err", err)
		}
		s.removeUnpacked(h)
	}
	var deleted []string
	ids := chainIDs(r.config.RootFS.DiffIDs)
	for i := len(ids) - 1; i >= 0; i-- {
		if !chains[ids[i]] {
			deleted = append(deleted, ids[i])
		}
	}
	return deleted
}

// neededLocked is the set of blobs some image or in-flight operation
// uses. Caller holds s.mu.
func (s *Service) neededLocked() map[v1.Hash]bool {
	needed := map[v1.Hash]bool{}
	for _, o := range s.images {
		needed[o.Manifest] = true
		if h, err := v1.NewHash(o.ID); err == nil {
			needed[h] = true
		}
		for _, l := range o.Layers {
			needed[l.Digest] = true
		}
	}
	for h := range s.leases {
		needed[h] = true
	}
	return needed
}

// chainIDs computes OCI chain IDs from diffIDs.
func chainIDs(diffIDs []v1.Hash) []string {
	out := make([]string, 0, len(diffIDs))
	prev := ""
	for _, d := range diffIDs {
		if prev == "" {
			prev = d.String()
		} else {
			sum := sha256.Sum256([]byte(prev + " " + d.String()))
			prev = "sha256:" + hex.EncodeToString(sum[:])
		}
		out = append(out, prev)
	}
	return out
}

func isImageIDPrefix(imageID, possiblePrefix string) bool {
	if strings.HasPrefix(imageID, possiblePrefix) {
		return true
	}
	if i := strings.IndexByte(imageID, ':'); i >= 0 {
		return strings.HasPrefix(imageID[i+1:], possiblePrefix)
	}
	return false
}

// isSingleReference is dockerd's test: all references are in one
// repository with at most one tag. False for none.
func isSingleReference(refs []reference.Named) bool {
	if len(refs) <= 1 {
		return len(refs) == 1
	}
	var single reference.Named
	canonical := map[string]bool{}
	for _, r := range refs {
		if reference.IsDigested(r) {
			canonical[r.Name()] = true
		} else if single == nil {
			single = r
		} else {
			return false
		}
	}
	if single == nil {
		single = refs[0]
	}
	return len(canonical) == 1 && canonical[single.Name()]
}
