package imagebuild

import (
	"context"

	"github.com/moby/moby/api/types/image"

	"github.com/husk-vm/husk/imagebuild/reference"
)

// History is GET /images/{name}/history, computed as dockerd does: one
// entry per history record of the image's config, newest first, a layer's
// uncompressed size on the entries that made a layer, and image IDs (with
// their tags) filled in by walking up the chain of parents a build
// recorded; entries beyond that chain are "<missing>".
func (s *Service) History(ctx context.Context, ref string) ([]image.HistoryResponseItem, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.resolveLocked(ref)
	if err != nil {
		return nil, err
	}
	cfg := r.config
	out := make([]image.HistoryResponseItem, 0, len(cfg.History))
	layer := 0
	for _, h := range cfg.History {
		var size int64
		if !h.EmptyLayer {
			if layer < len(r.Layers) {
				size = r.Layers[layer].reportedSize()
			}
			layer++
		}
		out = append(out, image.HistoryResponseItem{
			ID: "<missing>", Created: h.Created.Unix(), CreatedBy: h.CreatedBy, Comment: h.Comment, Size: size,
		})
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	cur := r
	for i := range out {
		out[i].ID = cur.ID
		var tags []string
		for _, n := range s.sortedRefsLocked(cur.ID) {
			if !reference.IsDigested(n) {
				tags = append(tags, reference.Familiar(n))
			}
		}
		out[i].Tags = tags
		p, err := s.parentLocked(cur.ID)
		if err != nil {
			break
		}
		cur = p
	}
	return out, nil
}
