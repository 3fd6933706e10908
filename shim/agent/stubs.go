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

// mountStubs lists, in the order they would be made, the mount points
// of a process's own mounts (ProcessSpec.Tmpfs and Binds) and their
// directories that root lacks: the mount stubs BuildKit removes after a
// step, so that its mounts leave nothing in the step's layer. Paths are
// relative to root and looked up inside it.
func mountStubs(root string, spec proto.ProcessSpec) []string {
	var targets []string
	for _, m := range spec.Tmpfs {
		targets = append(targets, m.Target)
	}
	for _, b := range spec.Binds {
		targets = append(targets, b.Target)
	}
	if len(targets) == 0 {
		return nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil
	}
	defer r.Close()
	var stubs []string
	for _, t := range targets {
		target := path.Clean("/" + t)[1:]
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

// removeStubs removes the directory the process's bind sources were
// staged in, then the mount stubs its mounts made, deepest first, each
// only if it is empty: a directory the process put files in (beside its
// mount) stays, as the process made it so.
func removeStubs(root string, stubs []string, staged string, log *slog.Logger) {
	if len(stubs) == 0 && staged == "" {
		return
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		log.Warn("remove mount stubs", "root", root, "err", err)
		return
	}
	defer r.Close()
	if staged != "" {
		if rel := path.Clean("/" + staged)[1:]; rel != "" {
			if err := r.RemoveAll(rel); err != nil {
				log.Warn("remove staged mount sources", "path", staged, "err", err)
			}
		}
	}
	for _, s := range slices.Backward(stubs) {
		if err := r.Remove(s); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Debug("mount stub kept", "path", s, "err", err)
		}
	}
}
