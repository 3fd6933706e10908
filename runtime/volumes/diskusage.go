package volumes

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/moby/moby/api/types/volume"
)

// DiskUsage is the volume part of GET /system/df: every volume with its
// UsageData, the bytes in it (sized as dockerd sizes a local volume: the
// apparent sizes of its files, each inode once) and the number of
// containers that use it.
func (s *Store) DiskUsage(ctx context.Context) ([]volume.Volume, error) {
	s.mu.Lock()
	var out []volume.Volume
	for _, name := range s.sortedNames() {
		v := s.toAPI(s.vols[name])
		v.UsageData = &volume.UsageData{RefCount: int64(len(s.refs[name]))}
		out = append(out, v)
	}
	s.mu.Unlock()
	// Sized outside the lock: a walk may take long, and a volume removed
	// meanwhile simply measures 0.
	for i := range out {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i].UsageData.Size = treeSize(out[i].Mountpoint)
	}
	if out == nil {
		out = []volume.Volume{}
	}
	return out, nil
}

// treeSize sums the sizes of everything but directories under dir, hard
// links once. Unreadable entries are skipped: a size is an estimate, and
// the container may change the tree as it is walked.
func treeSize(dir string) int64 {
	seen := map[uint64]bool{}
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += info.Size()
		return nil
	})
	return total
}
