package imagebuild

import (
	"context"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/image"
)

// DiskUsage is the image part of GET /system/df, as dockerd computes it:
// the images `docker images` lists, each with the number of containers
// using it and its SharedSize (the uncompressed sizes of its layers that
// another image has too; a layer is identified by its chain ID, so the
// same diff on another base is not shared), and layersSize, the sum over
// every distinct layer of every image, intermediate ones included.
func (s *Service) DiskUsage(ctx context.Context) (layersSize int64, images []image.Summary, err error) {
	images, err = s.List(ctx, false, nil)
	if err != nil {
		return 0, nil, err
	}
	// Only here: up to API 1.50 dockerd counts an image's containers for
	// the disk usage alone, and `docker images` shows N/A (-1).
	if s.opts.InUse != nil {
		for i := range images {
			images[i].Containers = int64(len(s.opts.InUse(images[i].ID)))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := map[string]int{}
	sizes := map[string]int64{}
	chains := map[string][]string{}
	for id, r := range s.images {
		ids := chainIDs(r.config.RootFS.DiffIDs)
		chains[id] = ids
		for i, c := range ids {
			refs[c]++
			if i < len(r.Layers) {
				sizes[c] = r.Layers[i].reportedSize()
			}
		}
	}
	for _, n := range sizes {
		layersSize += n
	}
	for i := range images {
		ids, ok := chains[images[i].ID]
		if !ok {
			// Removed since it was listed: nothing is known to share.
			continue
		}
		images[i].SharedSize = 0
		for _, c := range ids {
			if refs[c] > 1 {
				images[i].SharedSize += sizes[c]
			}
		}
	}
	return layersSize, images, nil
}

// ImageSize is the image's "Size", the sum of its layers' reported sizes.
func (s *Service) ImageSize(ctx context.Context, imageID string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.images[imageID]
	if !ok {
		return 0, errdefs.ErrNotFound.WithMessage("No such image: " + imageID)
	}
	return r.Size, nil
}
