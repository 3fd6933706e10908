package apicompat

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/husk-vm/husk/runtime/timestamp"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/volume"
)

// ImageDiskUsager is implemented by an Images backend that answers the
// image part of GET /system/df: the size of every distinct layer, and the
// images `docker images` lists with SharedSize and Containers set.
type ImageDiskUsager interface {
	DiskUsage(ctx context.Context) (layersSize int64, images []image.Summary, err error)
}

// VolumeDiskUsager is implemented by a Volumes backend that answers the
// volume part of GET /system/df: every volume with its UsageData.
type VolumeDiskUsager interface {
	DiskUsage(ctx context.Context) ([]volume.Volume, error)
}

// ContainerSizer is implemented by a Containers backend that measures a
// container's writable layer and root filesystem, for GET
// /containers/{name}/json?size=1 (`docker inspect --size`).
type ContainerSizer interface {
	Size(ctx context.Context, ref string) (rw, rootFs int64, err error)
}

// BuildCache is implemented by a Builder that keeps a build cache of its
// own, apart from images. Without it, /system/df reports no build cache
// and POST /build/prune has nothing to prune, which is what dockerd
// answers for the classic builder, whose cache is its intermediate images
// (pruned with the images).
type BuildCache interface {
	DiskUsage(ctx context.Context) ([]build.CacheRecord, error)
	Prune(ctx context.Context, all bool, filters map[string][]string) (build.CachePruneReport, error)
}

// diskUsageResponse is GET /system/df's answer up to API 1.51 (moby's
// types.DiskUsage, which the API module no longer has): a type that was
// not asked for is null.
type diskUsageResponse struct {
	LayersSize int64
	Images     []image.Summary
	Containers []container.Summary
	Volumes    []volume.Volume
	BuildCache []build.CacheRecord
}

// diskUsageTypes are the values of GET /system/df's "type" parameter.
var diskUsageTypes = []string{"container", "image", "volume", "build-cache"}

func (s *server) getDiskUsage(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	want := map[string]bool{}
	// "type" came with API 1.42; older clients always get everything.
	if types, ok := r.Form["type"]; ok && !versionLess(apiVersion(ctx), "1.42") {
		for _, t := range types {
			if !slices.Contains(diskUsageTypes, t) {
				return errdefs.ErrInvalidArgument.WithMessage("unknown object type: " + t)
			}
			want[t] = true
		}
	} else {
		for _, t := range diskUsageTypes {
			want[t] = true
		}
	}

	var du diskUsageResponse
	if want["image"] {
		iu, ok := s.cfg.Images.(ImageDiskUsager)
		if !ok {
			return errdefs.ErrNotImplemented.WithMessage("this daemon cannot report image disk usage")
		}
		size, imgs, err := iu.DiskUsage(ctx)
		if err != nil {
			return fmt.Errorf("failed to retrieve image list: %w", err)
		}
		du.LayersSize, du.Images = size, nonNil(imgs)
	}
	if want["container"] {
		list, err := s.cfg.Containers.List(ctx, ContainerListOptions{All: true, Size: true})
		if err != nil {
			return fmt.Errorf("failed to retrieve container list: %w", err)
		}
		du.Containers = nonNil(list)
	}
	if want["volume"] {
		du.Volumes = []volume.Volume{}
		if vu, ok := s.cfg.Volumes.(VolumeDiskUsager); ok {
			vols, err := vu.DiskUsage(ctx)
			if err != nil {
				return err
			}
			du.Volumes = nonNil(vols)
		}
	}
	if want["build-cache"] {
		du.BuildCache = []build.CacheRecord{}
		if bc, ok := s.cfg.Builder.(BuildCache); ok {
			recs, err := bc.DiskUsage(ctx)
			if err != nil {
				return fmt.Errorf("error getting build cache usage: %w", err)
			}
			du.BuildCache = nonNil(recs)
		}
	}
	return writeJSON(w, http.StatusOK, du)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// buildPruneFilters are the filters moby v28 accepts on POST
// /build/prune ("mutable" and "immutable" are BuildKit's but refused).
var buildPruneFilters = map[string]bool{
	"until": true, "unused-for": true, "label": true, "label!": true,
	"id": true, "parent": true, "type": true, "description": true, "inuse": true, "shared": true, "private": true,
}

// postBuildPrune is POST /build/prune, which `docker system prune` calls
// after the other prunes. Filters are checked as moby checks them, also
// when there is no cache to prune.
func (s *server) postBuildPrune(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	filters, err := parseFilters(r)
	if err != nil {
		return err
	}
	if err := checkBuildPruneFilters(filters); err != nil {
		// moby's builder backend wraps whatever its prune refuses.
		return errdefs.ErrInvalidArgument.WithMessage("failed to prune build cache: " + err.Error())
	}
	bc, ok := s.cfg.Builder.(BuildCache)
	if !ok {
		// dockerd's answer when nothing was pruned.
		return writeJSON(w, http.StatusOK, build.CachePruneReport{})
	}
	report, err := bc.Prune(ctx, boolValue(r, "all"), filters)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, report)
}

// checkBuildPruneFilters checks filters as moby's BuildKit backend does
// before it prunes.
func checkBuildPruneFilters(filters map[string][]string) error {
	names := make([]string, 0, len(filters))
	for k := range filters {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !buildPruneFilters[k] {
			return fmt.Errorf("invalid filter '%s'", k)
		}
	}
	until, unusedFor := filters["until"], filters["unused-for"]
	if len(until) > 0 && len(unusedFor) > 0 {
		return errors.New(`conflicting filters: "until" and "unused-for"`)
	}
	key := "until"
	if len(unusedFor) > 0 {
		key, until = "unused-for", unusedFor
	}
	switch len(until) {
	case 0:
	case 1:
		if _, err := timestamp.Parse(until[0], time.Now()); err != nil {
			return fmt.Errorf("%q filter expects a duration (e.g., '24h') or a timestamp: %w", key, err)
		}
	default:
		return errors.New("filters expect only one value")
	}
	for _, k := range names {
		if len(filters[k]) > 1 && !strings.HasPrefix(k, "label") {
			return errors.New("filters expect only one value")
		}
	}
	return nil
}

// inspectSize adds SizeRw and SizeRootFs to an inspect answer when the
// client asked for them (?size=1) and the backend can measure them.
func (s *server) inspectSize(ctx context.Context, r *http.Request, resp *container.InspectResponse) error {
	if err := parseForm(r); err != nil {
		return err
	}
	if !boolValue(r, "size") {
		return nil
	}
	sz, ok := s.cfg.Containers.(ContainerSizer)
	if !ok {
		return nil
	}
	rw, rootFs, err := sz.Size(ctx, resp.ID)
	if err != nil {
		return err
	}
	resp.SizeRw, resp.SizeRootFs = &rw, &rootFs
	return nil
}
