package agent

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/husk-vm/husk/shim/proto"
)

// tmpfsStubs lists, in the order they would be made, the directories of
// the mount points of a process's tmpfs mounts (ProcessSpec.Tmpfs) that
// root lacks: the mount stubs BuildKit removes after a step, so that a
// cache or tmpfs mount leaves nothing in the step's layer. Paths are
// relative to root and looked up inside it.
func tmpfsStubs(root string, mounts []proto.ProcessTmpfs) []string {
	if len(mounts) == 0 {
		return nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil
	}
	defer r.Close()
	var stubs []string
	for _, m := range mounts {
		target := path.Clean("/" + m.Target)[1:]
		if target == "" {
			continue
		}
		prefix := ""
		for part := range strings.SplitSeq(target, "/") {
			prefix = path.Join(prefix, part)
			if _, err := r.Stat(prefix); errors.Is(err, fs.ErrNotExist) && !slices.Contains(stubs, prefix) {
				stubs = append(stubs, prefix)
			}
		}
	}
	return stubs
}

// removeStubs removes the mount stubs a process's mounts made, deepest
// first, each only if it is an empty directory: one the process put
// files in (beside its mount) stays, as the process made it so.
func removeStubs(root string, stubs []string, log *slog.Logger) {
	if len(stubs) == 0 {
		return
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		log.Warn("remove mount stubs", "root", root, "err", err)
		return
	}
	defer r.Close()
	for _, s := range slices.Backward(stubs) {
		if err := r.Remove(s); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Debug("mount stub kept", "path", s, "err", err)
		}
	}
}
