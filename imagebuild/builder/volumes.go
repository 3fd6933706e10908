package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// volumeChanges leaves out of a RUN step's layer what the step changed
// under the stage's VOLUME paths. dockerd's classic builder runs each step
// in a container whose VOLUME paths are volumes, so those changes never
// reach the step's layer ("changes to the volume after it has been
// declared are discarded"), while the mount points it makes for them do.
// BuildKit keeps the changes, and so does husk's builder for a BuildKit
// client.
type volumeChanges struct {
	// volumes are the VOLUME paths as the stage's root resolves them
	// (relative, symlinks followed); created are those the step's root
	// did not have, whose directories it makes, as dockerd makes a
	// missing volume's mount point.
	volumes []string
	created map[string]bool
	dropped atomic.Bool
	// first is the first entry left out, for the debug log.
	first atomic.Value
}

// volumesOf resolves st's VOLUME paths in its root, and returns the
// directories a RUN step's root lacks for them as a tar for
// Sandbox.PutFiles (nil when none is missing).
func (bd *build) volumesOf(ctx context.Context, st *stage) (*volumeChanges, []byte, error) {
	fs, err := bd.fsIndex(ctx, st)
	if err != nil {
		return nil, nil, err
	}
	v := &volumeChanges{created: map[string]bool{}}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	made := map[string]bool{}
	now := time.Now()
	for _, vol := range slices.Sorted(maps.Keys(st.cfg.Config.Volumes)) {
		rel, _ := cleanRel(vol)
		resolved, found := fs.resolve(rel)
		if resolved == "" {
			continue // VOLUME / : dockerd refuses to mount over the root
		}
		v.volumes = append(v.volumes, resolved)
		if found {
			continue
		}
		v.created[resolved] = true
		parts := strings.Split(resolved, "/")
		for i := range parts {
			p := strings.Join(parts[:i+1], "/")
			if _, ok := fs.resolve(p); ok || made[p] {
				continue
			}
			made[p] = true
			if err := tw.WriteHeader(&tar.Header{Name: p + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now}); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, nil, err
	}
	if len(made) == 0 {
		return v, nil, nil
	}
	return v, buf.Bytes(), nil
}

// filter returns r's layer without the changes under the volumes.
func (v *volumeChanges) filter(r io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(v.copy(r, pw)) }()
	return pr
}

func (v *volumeChanges) copy(r io.Reader, w io.Writer) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// What follows the archive's end (padding) is read too: the
			// writer's end of r may wait for it to be taken.
			if _, err := io.Copy(io.Discard, r); err != nil {
				return err
			}
			return tw.Close()
		}
		if err != nil {
			return err
		}
		// A hard link to a file left out goes with it.
		if v.leftOut(h) || (h.Typeflag == tar.TypeLink && v.leftOut(&tar.Header{Name: h.Linkname})) {
			if !v.dropped.Swap(true) {
				v.first.Store(h.Name)
			}
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// leftOut reports whether a layer entry changes a volume: a path in one,
// a whiteout of one, or one's own directory unless the step made it.
func (v *volumeChanges) leftOut(h *tar.Header) bool {
	p, _ := cleanRel(h.Name)
	dir, base := "", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		dir, base = p[:i], p[i+1:]
	}
	whiteout := strings.HasPrefix(base, ".wh.") && base != ".wh..wh..opq"
	if whiteout {
		p = strings.TrimPrefix(dir+"/"+strings.TrimPrefix(base, ".wh."), "/")
	}
	for _, vol := range v.volumes {
		if p == vol {
			return whiteout || h.Typeflag != tar.TypeDir || !v.created[vol]
		}
		if strings.HasPrefix(p, vol+"/") {
			return true
		}
	}
	return false
}
