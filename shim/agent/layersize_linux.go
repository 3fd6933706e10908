//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/husk-vm/husk/shim/proto"
)

// layerSize serves proto.OpLayerSize.
func (a *Agent) layerSize(ctx context.Context, s *stream) error {
	a.mu.Lock()
	root := a.root
	a.mu.Unlock()
	if root == "" {
		return &agentError{proto.KindInvalid, "layer-size: the container root is not set up"}
	}
	dr, ok := a.opts.Rootfs.(DiffRootfs)
	if !ok {
		return &agentError{proto.KindInvalid, "layer-size: this root has no writable layer to measure"}
	}
	upper, _ := dr.DiffDirs()
	n, err := treeSize(ctx, upper)
	if err != nil {
		return fmt.Errorf("measure the writable layer: %w", err)
	}
	return s.respond(proto.Response{LayerSize: &n})
}

// treeSize sums the apparent sizes of everything but directories under
// dir, each inode once, as dockerd sizes a container's layer. Entries the
// container removes during the walk are skipped.
func treeSize(ctx context.Context, dir string) (int64, error) {
	seen := map[uint64]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
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
	return total, err
}
