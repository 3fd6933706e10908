package builder

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
)

// stepMounts are a RUN step's --mount flags, for a BuildKit client, as
// husk carries them out: tmpfs and cache mounts are empty tmpfs mounts
// of the step's own (a cache that starts empty every time, which BuildKit
// allows: a cache may be pruned at any moment); a bind's files (from the
// context, a stage or an image) and a secret's are spooled into one tar,
// put into the VM's root under staged just before the step runs, bound
// at their targets for the step alone, and removed by the agent when the
// step's process goes, so nothing of them reaches the layer. SSH agent
// sockets and cache from= are not carried.
type stepMounts struct {
	tmpfs  []TmpfsMount
	binds  []BindMount
	env    []string // secrets given as environment variables
	staged string
	// files and secrets are the binds' sources, spooled apart so that a
	// secret is no part of the step's cache key, as in BuildKit.
	files, secrets *spooledLayer
	key            string // what tells the step apart in the cache
}

// stagedDir is where a step's mount sources are put in the VM's root.
// One step runs at a time in a build VM, and the agent removes the
// directory when the step's process goes.
const stagedDir = "/.husk-run-mounts"

// Close drops the spooled sources.
func (m *stepMounts) Close() {
	for _, s := range []*spooledLayer{m.files, m.secrets} {
		if s != nil {
			s.Close()
		}
	}
}

// stage puts the binds' sources into the VM.
func (m *stepMounts) stage(ctx context.Context, vm Sandbox) error {
	for _, s := range []*spooledLayer{m.files, m.secrets} {
		if s == nil {
			continue
		}
		if _, err := s.f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if err := vm.PutFiles(ctx, s.f); err != nil {
			return fmt.Errorf("put the mounts' files into the build VM: %w", err)
		}
	}
	return nil
}

// runMounts reads a RUN's --mount flags.
func (bd *build) runMounts(ctx context.Context, st *stage, mounts []*instructions.Mount) (_ *stepMounts, err error) {
	out := &stepMounts{}
	defer func() {
		if err != nil {
			out.Close()
		}
	}()
	var key strings.Builder
	type staged struct {
		src      copySource
		uid, gid int
		mode     *os.FileMode
		dest     string
	}
	var files, secrets []staged
	// A secret's source is a tree of its own, made here, which goes once
	// it is spooled, or with an error on the way.
	defer func() {
		for _, s := range secrets {
			s.src.tree.Close()
		}
	}()
	absolute := func(target string) string {
		if !path.IsAbs(target) {
			target = path.Join("/", st.cfg.Config.WorkingDir, target)
		}
		return path.Clean(target)
	}
	for _, m := range mounts {
		switch m.Type {
		case instructions.MountTypeTmpfs, instructions.MountTypeCache:
			if m.Type == instructions.MountTypeCache && m.From != "" {
				return nil, errdefs.ErrNotImplemented.WithMessage("RUN --mount=type=cache,from= is not supported by husk's builder")
			}
			t := TmpfsMount{Target: absolute(m.Target), Mode: 0o755, Size: m.SizeLimit}
			if m.Type == instructions.MountTypeTmpfs {
				t.Mode = 0o1777
			}
			if m.Mode != nil {
				t.Mode = uint32(*m.Mode)
			}
			if m.UID != nil {
				t.UID = int(*m.UID)
			}
			if m.GID != nil {
				t.GID = int(*m.GID)
			}
			out.tmpfs = append(out.tmpfs, t)
			fmt.Fprintf(&key, "tmpfs %q %o %d:%d %d;", t.Target, t.Mode, t.UID, t.GID, t.Size)
		case instructions.MountTypeBind:
			tree, isContext, err := bd.sourceTree(ctx, m.From)
			if err != nil {
				return nil, err
			}
			hidden := func(p string) bool { return isContext && bd.ignored(p) }
			rel, _ := cleanRel(m.Source)
			src := copySource{tree: tree, isDir: true, hidden: hidden}
			if rel != "" {
				resolved, ok := tree.resolve(rel, true)
				if !ok || hidden(rel) {
					return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("failed to compute cache key: %q not found: not found", "/"+rel))
				}
				src = bd.source(tree, resolved, rel, hidden)
			}
			uid, gid := 0, 0
			if !isContext {
				uid, gid = keepOwner, keepOwner
			}
			dest := path.Join(stagedDir, "b"+strconv.Itoa(len(files)))
			files = append(files, staged{src: src, uid: uid, gid: gid, dest: dest})
			out.binds = append(out.binds, BindMount{Source: dest, Target: absolute(m.Target), Dir: src.isDir, ReadOnly: m.ReadOnly})
			fmt.Fprintf(&key, "bind %q %q %q %v;", m.From, rel, absolute(m.Target), m.ReadOnly)
		case instructions.MountTypeSecret:
			id := m.CacheID
			if id == "" {
				id = m.Source
			}
			if id == "" {
				id = path.Base(m.Target)
			}
			var data []byte
			if bd.opts.Secret != nil {
				if data, err = bd.opts.Secret(ctx, id); err != nil {
					return nil, fmt.Errorf("secret %s: %w", id, err)
				}
			}
			if data == nil {
				if m.Required {
					return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("secret %s: not found", id))
				}
				continue
			}
			if m.Env != nil {
				name := *m.Env
				if name == "" {
					name = id
				}
				out.env = append(out.env, name+"="+string(data))
			}
			target := m.Target
			if target == "" && m.Env == nil {
				target = "/run/secrets/" + path.Base(id)
			}
			if target == "" {
				continue
			}
			src, err := bd.fileSource(ctx, "secret", data, 0o400)
			if err != nil {
				return nil, fmt.Errorf("secret %s: %w", id, err)
			}
			mode := os.FileMode(0o400)
			if m.Mode != nil {
				mode = os.FileMode(*m.Mode)
			}
			uid, gid := 0, 0
			if m.UID != nil {
				uid = int(*m.UID)
			}
			if m.GID != nil {
				gid = int(*m.GID)
			}
			dest := path.Join(stagedDir, "s"+strconv.Itoa(len(secrets)))
			secrets = append(secrets, staged{src: src, uid: uid, gid: gid, mode: &mode, dest: dest})
			out.binds = append(out.binds, BindMount{Source: dest, Target: absolute(target), ReadOnly: true})
		default:
			return nil, errdefs.ErrNotImplemented.WithMessage(fmt.Sprintf("RUN --mount=type=%s is not supported by husk's builder", m.Type))
		}
	}
	spool := func(list []staged) (*spooledLayer, error) {
		if len(list) == 0 {
			return nil, nil
		}
		sp, err := bd.spoolLayer(ctx, newFSIndex(), time.Unix(0, 0), func(lw *layerWriter) error {
			for _, s := range list {
				if err := lw.copy(s.src, s.dest, s.uid, s.gid, s.mode, false); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("gather the mounts' files: %w", err)
		}
		return sp, nil
	}
	if out.files, err = spool(files); err != nil {
		return nil, err
	}
	if out.secrets, err = spool(secrets); err != nil {
		return nil, err
	}
	if out.files != nil {
		// The bound files' names, owners and contents.
		fmt.Fprintf(&key, "files %s;", out.files.key)
	}
	if len(out.binds) > 0 {
		out.staged = stagedDir
	}
	out.key = key.String()
	return out, nil
}
