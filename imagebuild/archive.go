package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/moby/moby/api/types/jsonstream"

	"github.com/husk-vm/husk/imagebuild/reference"
)

// archiveEntry is one element of an archive's manifest.json.
type archiveEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

type ociDescriptor struct {
	MediaType   types.MediaType   `json:"mediaType"`
	Digest      v1.Hash           `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociIndex struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     types.MediaType `json:"mediaType"`
	Manifests     []ociDescriptor `json:"manifests"`
}

type ociManifest struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     types.MediaType `json:"mediaType"`
	Config        ociDescriptor   `json:"config"`
	Layers        []ociDescriptor `json:"layers"`
}

type saveItem struct {
	rec  *record
	tags []reference.Named
}

// Save writes refs as dockerd 25+ does: an OCI image layout (index.json,
// oci-layout, blobs/sha256/…) that is also a docker-archive (manifest.json,
// repositories), with blobs exactly as stored. A repository name without a
// tag saves all its tags, as in dockerd.
func (s *Service) Save(ctx context.Context, refs []string, w io.Writer) error {
	items, err := s.saveItems(refs)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	written := map[v1.Hash]bool{}
	epoch := time.Unix(0, 0)
	writeFile := func(name string, b []byte) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if _, err := tw.Write(b); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		return nil
	}
	writeBlob := func(h v1.Hash) error {
		if written[h] {
			return nil
		}
		written[h] = true
		f, err := s.blobs.Open(h)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("stat blob %s: %w", h, err)
		}
		name := "blobs/sha256/" + h.Hex
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: fi.Size(), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if _, err := io.Copy(tw, ctxReader{ctx: ctx, r: f}); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		return nil
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("write %s: %w", d, err)
		}
	}

	var manifest []archiveEntry
	index := ociIndex{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	repositories := map[string]map[string]string{}
	for _, it := range items {
		r := it.rec
		cfgHash, err := v1.NewHash(r.ID)
		if err != nil {
			return fmt.Errorf("image id %s: %w", r.ID, err)
		}
		entry := archiveEntry{Config: "blobs/sha256/" + cfgHash.Hex, RepoTags: []string{}}
		for _, blob := range append([]v1.Hash{r.Manifest, cfgHash}, layerDigests(r)...) {
			if err := writeBlob(blob); err != nil {
				return err
			}
		}
		for _, l := range r.Layers {
			entry.Layers = append(entry.Layers, "blobs/sha256/"+l.Digest.Hex)
		}
		mSize, err := s.blobs.Size(r.Manifest)
		if err != nil {
			return err
		}
		raw, err := s.blobs.ReadAll(r.Manifest)
		if err != nil {
			return err
		}
		mt := manifestMediaType(raw)
		chains := chainIDs(r.config.RootFS.DiffIDs)
		if len(it.tags) == 0 {
			index.Manifests = append(index.Manifests, ociDescriptor{MediaType: mt, Digest: r.Manifest, Size: mSize})
		}
		for _, t := range it.tags {
			entry.RepoTags = append(entry.RepoTags, reference.Familiar(t))
			index.Manifests = append(index.Manifests, ociDescriptor{
				MediaType: mt, Digest: r.Manifest, Size: mSize,
				Annotations: map[string]string{
					"io.containerd.image.name":          t.String(),
					"org.opencontainers.image.ref.name": reference.Tag(t),
				},
			})
			if len(chains) > 0 {
				repo := reference.FamiliarName(t)
				if repositories[repo] == nil {
					repositories[repo] = map[string]string{}
				}
				repositories[repo][reference.Tag(t)] = strings.TrimPrefix(chains[len(chains)-1], "sha256:")
			}
		}
		manifest = append(manifest, entry)
	}
	files := []struct {
		name string
		v    any
	}{{"index.json", index}, {"manifest.json", manifest}, {"repositories", repositories}}
	if err := writeFile("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	for _, f := range files {
		b, err := json.Marshal(f.v)
		if err != nil {
			return fmt.Errorf("encode %s: %w", f.name, err)
		}
		if err := writeFile(f.name, b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish archive: %w", err)
	}
	return nil
}

// saveItems resolves Save's arguments under the lock.
func (s *Service) saveItems(refs []string) ([]saveItem, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var items []saveItem
	byID := map[string]int{}
	add := func(r *record, tag reference.Named) {
		i, ok := byID[r.ID]
		if !ok {
			i = len(items)
			byID[r.ID] = i
			items = append(items, saveItem{rec: r})
		}
		if tag == nil {
			return
		}
		for _, t := range items[i].tags {
			if t.String() == tag.String() {
				return
			}
		}
		items[i].tags = append(items[i].tags, tag)
	}
	for _, ref := range refs {
		r, err := s.resolveLocked(ref)
		if err != nil {
			// A bare repository name saves every tag of it.
			n, perr := reference.Parse(ref)
			if perr != nil {
				return nil, err
			}
			if reference.Tag(n) != "" || reference.IsDigested(n) {
				if errdefs.IsNotFound(err) {
					// dockerd's reference store's words.
					return nil, errdefs.ErrNotFound.WithMessage("reference does not exist")
				}
				return nil, err
			}
			var keys []string
			for k := range s.refs {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			found := false
			for _, k := range keys {
				t, err := reference.Parse(k)
				if err != nil || reference.IsDigested(t) || t.Name() != n.Name() {
					continue
				}
				add(s.images[s.refs[k]], t)
				found = true
			}
			if !found {
				if errdefs.IsNotFound(err) {
					// As dockerd's image store, which it searches last,
					// names the image as given.
					return nil, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
				}
				return nil, err
			}
			continue
		}
		if isImageIDPrefix(r.ID, ref) {
			add(r, nil)
			continue
		}
		n, err := reference.ParseWithDefaultTag(ref)
		if err != nil {
			return nil, err
		}
		if reference.IsDigested(n) {
			add(r, nil)
		} else {
			add(r, n)
		}
	}
	for i := range items {
		sort.Slice(items[i].tags, func(a, b int) bool { return items[i].tags[a].String() < items[i].tags[b].String() })
	}
	return items, nil
}

func layerDigests(r *record) []v1.Hash {
	out := make([]v1.Hash, 0, len(r.Layers))
	for _, l := range r.Layers {
		out = append(out, l.Digest)
	}
	return out
}

// manifestMediaType reads a manifest's own mediaType field, defaulting to
// OCI as the image spec does.
func manifestMediaType(raw []byte) types.MediaType {
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
	}
	if json.Unmarshal(raw, &m) == nil && m.MediaType != "" {
		return m.MediaType
	}
	return types.OCIManifestSchema1
}

// Load reads an archive written by docker save (dockerd up to 24, 25+, or
// go-containerregistry's tarball) and reports "Loaded image: x" lines.
// Every file is streamed straight into the blob store, so layers are
// written once; blobs no image ends up using are removed at the end.
func (s *Service) Load(ctx context.Context, r io.Reader, progress func(jsonstream.Message)) error {
	out := &progressOut{fn: progress}
	files := map[string]v1.Hash{}
	links := map[string]string{}
	var held []v1.Hash
	defer func() {
		s.release(held...)
		s.collect(held)
	}()

	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// dockerd's words, less its untar helper's exit status.
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Error processing tar file: %v", err))
		}
		name := cleanArchivePath(hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeReg:
			w, err := s.blobs.Create()
			if err != nil {
				return err
			}
			_, err = io.Copy(w, ctxReader{ctx: ctx, r: tr})
			if err == nil {
				// Lease before the blob becomes visible, so that a
				// concurrent rmi's collection cannot take it.
				h := w.Digest()
				s.lease(h)
				held = append(held, h)
				_, err = w.Commit(h)
			}
			w.Close()
			if err != nil {
				return fmt.Errorf("read %s from archive: %w", hdr.Name, err)
			}
			files[name] = held[len(held)-1]
		case tar.TypeSymlink:
			target := hdr.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(name), target)
			}
			links[name] = cleanArchivePath(target)
		case tar.TypeLink:
			links[name] = cleanArchivePath(hdr.Linkname)
		}
	}
	lookup := func(name string) (v1.Hash, bool) {
		name = cleanArchivePath(name)
		for range 16 { // bounded: links may form cycles
			if h, ok := files[name]; ok {
				return h, true
			}
			next, ok := links[name]
			if !ok {
				return v1.Hash{}, false
			}
			name = next
		}
		return v1.Hash{}, false
	}

	mh, ok := lookup("manifest.json")
	if !ok {
		return errdefs.ErrInvalidArgument.WithMessage("invalid archive: does not contain a manifest.json")
	}
	raw, err := s.blobs.ReadAll(mh)
	if err != nil {
		return err
	}
	var entries []archiveEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid archive: failed to decode manifest.json: %v", err))
	}
	if entries == nil {
		return errdefs.ErrInvalidArgument.WithMessage("invalid manifest, manifest cannot be null (but can be [])")
	}

	var idLines strings.Builder
	refCount := 0
	for _, e := range entries {
		id, err := s.loadEntry(ctx, e, lookup, out)
		if err != nil {
			return err
		}
		fmt.Fprintf(&idLines, "Loaded image ID: %s\n", id)
		// dockerd counts tags per image and only looks at the last one
		// when deciding whether to print IDs; kept for identical output.
		refCount = 0
		for _, t := range e.RepoTags {
			n, err := reference.Parse(t)
			if err != nil {
				return err
			}
			if reference.Tag(n) == "" || reference.IsDigested(n) {
				return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid tag %q", t))
			}
			prev, err := s.setTag(n, id)
			if err != nil {
				return err
			}
			if prev != "" && prev != id {
				out.send(jsonstream.Message{Stream: fmt.Sprintf("The image %s already exists, renaming the old one with ID %s to empty string\n", reference.Familiar(n), prev)})
			}
			out.send(jsonstream.Message{Stream: "Loaded image: " + reference.Familiar(n) + "\n"})
			refCount++
		}
	}
	if refCount == 0 && idLines.Len() > 0 {
		out.send(jsonstream.Message{Stream: idLines.String()})
	}
	return nil
}

// loadEntry stores one image of an archive and returns its ID.
func (s *Service) loadEntry(ctx context.Context, e archiveEntry, lookup func(string) (v1.Hash, bool), out *progressOut) (string, error) {
	cfgHash, ok := lookup(e.Config)
	if !ok {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid archive: missing config %s", e.Config))
	}
	rawCfg, err := s.blobs.ReadAll(cfgHash)
	if err != nil {
		return "", err
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawCfg))
	if err != nil {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid archive: config %s: %v", e.Config, err))
	}
	if want, got := len(cfg.RootFS.DiffIDs), len(e.Layers); want != got {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid manifest, layers length mismatch: expected %d, got %d", want, got))
	}
	m := ociManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        ociDescriptor{MediaType: types.OCIConfigJSON, Digest: cfgHash, Size: int64(len(rawCfg))},
	}
	layers := make([]layerRecord, len(e.Layers))
	for i, name := range e.Layers {
		h, ok := lookup(name)
		if !ok {
			return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid archive: missing layer %s", name))
		}
		size, err := s.blobs.Size(h)
		if err != nil {
			return "", err
		}
		mt, err := s.sniffBlob(h)
		if err != nil {
			return "", err
		}
		l := layerRecord{Digest: h, MediaType: mt, Size: size, DiffID: cfg.RootFS.DiffIDs[i]}
		if sizes, known := s.knownDiff(h, l.DiffID); known {
			l.UncompressedSize, l.ContentSize = sizes.UncompressedSize, sizes.ContentSize
		} else {
			id := shortID(l.DiffID.String())
			sizes, err := s.checkDiffID(ctx, l, func(cur int64) {
				out.progress(id, "Loading layer", cur, size)
			}, true)
			if err != nil {
				return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid diffID for layer %d: %v", i, err))
			}
			l.UncompressedSize, l.ContentSize = sizes.UncompressedSize, sizes.ContentSize
		}
		layers[i] = l
		m.Layers = append(m.Layers, ociDescriptor{MediaType: mt, Digest: h, Size: size})
	}
	rawManifest, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode manifest: %w", err)
	}
	mh, _, err := v1.SHA256(bytes.NewReader(rawManifest))
	if err != nil {
		return "", fmt.Errorf("hash manifest: %w", err)
	}
	s.lease(mh)
	defer s.release(mh)
	if _, _, err := s.blobs.Put(bytes.NewReader(rawManifest), mh); err != nil {
		return "", fmt.Errorf("store manifest: %w", err)
	}
	return s.commitImage(cfgHash.String(), mh, layers, cfg)
}

func (s *Service) sniffBlob(h v1.Hash) (types.MediaType, error) {
	f, err := s.blobs.Open(h)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		return gzipped.layerMediaType(), nil
	case bytes.HasPrefix(head, zstdMagic):
		return zstded.layerMediaType(), nil
	}
	return uncompressed.layerMediaType(), nil
}

// setTag points a tag at id and returns what it pointed at before.
func (s *Service) setTag(n reference.Named, id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.refs[n.String()]
	s.refs[n.String()] = id
	if err := s.saveRefsLocked(); err != nil {
		return "", err
	}
	return prev, nil
}

// collect deletes the given blobs unless an image or lease needs them.
func (s *Service) collect(candidates []v1.Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	needed := s.neededLocked()
	for _, h := range candidates {
		if needed[h] {
			continue
		}
		if err := s.blobs.Delete(h); err != nil {
			s.log.Warn("could not delete unused blob", "digest", h, "err", err)
		}
		s.removeUnpacked(h)
	}
}

// cleanArchivePath normalises a path inside an archive: no leading "/" or
// "./", no "..", so lookups are by one canonical name.
func cleanArchivePath(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}
