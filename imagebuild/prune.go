package imagebuild

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/image"

	"github.com/husk-vm/husk/runtime/timestamp"
)

// acceptedPruneFilters are the filters POST /images/prune takes.
var acceptedPruneFilters = map[string]bool{"dangling": true, "label": true, "label!": true, "until": true}

// Remover removes an image by reference or ID, as DELETE /images/{name}
// does (untagging first), with whatever the caller does around it
// (events, base disks).
type Remover func(ctx context.Context, ref string, force, prune bool) ([]image.DeleteResponse, error)

// Prune is POST /images/prune, with dockerd 20.10's rules: by default
// only dangling images go (no tag, and no image built on them); with
// dangling=false every image no container uses, each removed through its
// references; until and label filters narrow the set. Images that cannot
// be removed (a container uses them) are skipped, as are references that
// went with an earlier removal. SpaceReclaimed sums the uncompressed
// sizes of the layers no remaining image shares.
func (s *Service) Prune(ctx context.Context, filters map[string][]string, remove Remover) (image.PruneReport, error) {
	rep := image.PruneReport{ImagesDeleted: []image.DeleteResponse{}}
	for k := range filters {
		if !acceptedPruneFilters[k] {
			return rep, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter '%s'", k))
		}
	}
	// dockerd 20.10 takes anything but false as true here.
	danglingOnly := !slices.ContainsFunc(filters["dangling"], func(v string) bool { return v == "false" || v == "0" })
	var until time.Time
	for _, v := range filters["until"] {
		t, err := timestamp.Parse(v, time.Now())
		if err != nil {
			return rep, errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
		if until.IsZero() || t.Before(until) {
			until = t
		}
	}

	type target struct {
		id   string
		refs []string
	}
	var targets []target
	layerSizes := map[string]int64{}
	s.mu.Lock()
	parents := s.parentsLocked()
	for id, r := range s.images {
		for i, c := range chainIDs(r.config.RootFS.DiffIDs) {
			if i < len(r.Layers) {
				layerSizes[c] = r.Layers[i].reportedSize()
			}
		}
		refs := s.sortedRefsLocked(id)
		// Only the heads of build chains are candidates when pruning
		// dangling images; an untagged parent is an intermediate image.
		if parents[id] && (danglingOnly || len(refs) == 0) {
			continue
		}
		if !until.IsZero() && r.config.Created.After(until) {
			continue
		}
		if !matchLabels(filters["label"], r.config.Config.Labels) || matchesAnyLabel(filters["label!"], r.config.Config.Labels) {
			continue
		}
		t := target{id: id}
		for _, ref := range refs {
			t.refs = append(t.refs, ref.String())
		}
		if danglingOnly && slices.ContainsFunc(t.refs, func(ref string) bool { return !strings.Contains(ref, "@") }) {
			continue
		}
		if len(t.refs) == 0 {
			t.refs = []string{id}
		}
		targets = append(targets, t)
	}
	s.mu.Unlock()

	slices.SortFunc(targets, func(a, b target) int { return strings.Compare(a.id, b.id) })
	for _, t := range targets {
		for _, ref := range t.refs {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			resp, err := remove(ctx, ref, false, true)
			if err != nil {
				// In use, or gone with an earlier reference.
				if !errdefs.IsConflict(err) && !errdefs.IsNotFound(err) {
					s.log.Warn("prune image", "ref", ref, "err", err)
				}
				continue
			}
			rep.ImagesDeleted = append(rep.ImagesDeleted, resp...)
		}
	}
	for _, d := range rep.ImagesDeleted {
		if size, ok := layerSizes[d.Deleted]; ok && size > 0 {
			rep.SpaceReclaimed += uint64(size)
		}
	}
	return rep, nil
}

// matchesAnyLabel says whether labels match one of the label! filters
// ("key" or "key=value").
func matchesAnyLabel(filters []string, labels map[string]string) bool {
	for _, f := range filters {
		k, v, hasValue := strings.Cut(f, "=")
		if got, ok := labels[k]; ok && (!hasValue || got == v) {
			return true
		}
	}
	return false
}
