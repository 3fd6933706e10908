package containers

import (
	"context"
	"path/filepath"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/rootfs"
)

// ImageSizer is implemented by an Images that knows an image's size
// (dockerd's image "Size"); the Manager then reports a container's
// SizeRootFs, which is its writable layer plus its image.
type ImageSizer interface {
	ImageSize(ctx context.Context, imageID string) (int64, error)
}

// Size measures a container's writable layer (SizeRw) and its whole root
// filesystem (SizeRootFs), as `docker inspect --size` and `docker ps -s`
// report them.
//
// The writable layer is sized as dockerd sizes one: the apparent sizes of
// the files in the overlay's upper directory, each inode once. A running
// VM's agent measures its own upper directory, since the latest writes
// are still in the guest's page cache; otherwise (stopped, created,
// paused, or an agent that cannot answer) the host reads the upper disk
// without booting anything (rootfs.UpperUsage).
func (m *Manager) Size(ctx context.Context, ref string) (rw, rootFs int64, err error) {
	c, err := m.lookup(ref)
	if err != nil {
		return 0, 0, err
	}
	return m.size(ctx, c)
}

// agentSizeTimeout bounds the guest's answer to a size request.
const agentSizeTimeout = 10 * time.Second

func (m *Manager) size(ctx context.Context, c *ctr) (rw, rootFs int64, err error) {
	c.mu.Lock()
	imageID := c.rec.ImageID
	var r *run
	if c.run != nil && c.rec.State.Running && !c.rec.State.Paused {
		r = c.run
	}
	c.mu.Unlock()
	measured := false
	if r != nil && r.client != nil {
		// A wedged agent must not hold up a listing: the disk is the
		// fallback.
		actx, cancel := context.WithTimeout(ctx, agentSizeTimeout)
		n, aerr := r.client.LayerSize(actx)
		cancel()
		if aerr == nil {
			rw, measured = n, true
		} else {
			m.log.Debug("measure the writable layer in the guest; reading the disk instead", "container", c.rec.ID, "err", aerr)
		}
	}
	if !measured {
		if rw, err = rootfs.UpperUsage(ctx, filepath.Join(c.dir, upperFile)); err != nil {
			return 0, 0, err
		}
	}
	rootFs = rw
	if is, ok := m.images.(ImageSizer); ok {
		n, err := is.ImageSize(ctx, imageID)
		if err != nil {
			// The image may be gone (removed with --force); the layer is
			// still worth reporting.
			m.log.Debug("size the container's image", "container", c.rec.ID, "image", imageID, "err", err)
		}
		rootFs += n
	}
	return rw, rootFs, nil
}

// fillSizes sets SizeRw and SizeRootFs on each listed container. A
// container removed meanwhile is left at 0, as is one whose disk cannot
// be read (which is logged): a listing does not fail for one of them.
func (m *Manager) fillSizes(ctx context.Context, list []container.Summary) {
	for i := range list {
		m.mu.Lock()
		c := m.byID[list[i].ID]
		m.mu.Unlock()
		if c == nil {
			continue
		}
		rw, rootFs, err := m.size(ctx, c)
		if err != nil {
			// One removed while the listing ran took its disk with it.
			c.mu.Lock()
			removed := c.removed
			c.mu.Unlock()
			if !removed {
				m.log.Warn("size a container's layer", "container", list[i].ID, "err", err)
			}
			continue
		}
		list[i].SizeRw, list[i].SizeRootFs = rw, rootFs
	}
}
