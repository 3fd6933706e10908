package imagebuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/klauspost/compress/gzip"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/moby/moby/api/types/image"
)

// LayerInfo describes one stored layer blob.
type LayerInfo struct {
	Digest           v1.Hash // of the blob as stored (compressed)
	MediaType        types.MediaType
	Size             int64   // of the blob as stored
	DiffID           v1.Hash // of the uncompressed tar
	UncompressedSize int64
	// ContentSize is the layer's size as dockerd reports it (contentSize);
	// nil where it is not known.
	ContentSize *int64
}

func (l LayerInfo) record() layerRecord {
	return layerRecord{Digest: l.Digest, MediaType: l.MediaType, Size: l.Size, DiffID: l.DiffID, UncompressedSize: l.UncompressedSize, ContentSize: l.ContentSize}
}

func (r layerRecord) info() LayerInfo {
	return LayerInfo{Digest: r.Digest, MediaType: r.MediaType, Size: r.Size, DiffID: r.DiffID, UncompressedSize: r.UncompressedSize, ContentSize: r.ContentSize}
}

// LayerInfos returns the layers of the image ref resolves to, base first.
func (s *Service) LayerInfos(ctx context.Context, ref string) ([]LayerInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.resolveLocked(ref)
	if err != nil {
		return nil, err
	}
	out := make([]LayerInfo, len(r.Layers))
	for i, l := range r.Layers {
		out[i] = l.info()
	}
	return out, nil
}

// OpenLayer opens a stored layer blob as its uncompressed tar.
func (s *Service) OpenLayer(l LayerInfo) (io.ReadCloser, error) {
	return s.openLayer(l.Digest)
}

// PutLayer stores the uncompressed layer tar read from r, gzip-compressed
// as dockerd pushes layers, and returns its description. The blob is held
// (safe from garbage collection) until ReleaseLayers; CreateImage makes an
// image refer to it.
//
// gzip at the fastest level: build layers are compressed once, on a
// machine whose cores are shared with guest VMs, and a registry accepts any
// level; the layer's identity is its diffID, not the blob digest.
func (s *Service) PutLayer(ctx context.Context, r io.Reader) (LayerInfo, error) {
	w, err := s.blobs.Create()
	if err != nil {
		return LayerInfo{}, err
	}
	defer w.Close()
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return LayerInfo{}, fmt.Errorf("start layer compression: %w", err)
	}
	diff := sha256.New()
	content := newContentSize()
	n, err := io.Copy(io.MultiWriter(zw, diff, content), ctxReader{ctx: ctx, r: r})
	if err != nil {
		content.abort()
		return LayerInfo{}, fmt.Errorf("store layer: %w", err)
	}
	var contentSize *int64
	if c, err := content.result(); err == nil {
		contentSize = &c
	}
	if err := zw.Close(); err != nil {
		return LayerInfo{}, fmt.Errorf("compress layer: %w", err)
	}
	info := LayerInfo{
		MediaType:        types.OCILayer,
		DiffID:           v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(diff.Sum(nil))},
		UncompressedSize: n,
		ContentSize:      contentSize,
		Size:             w.Size(),
		Digest:           w.Digest(),
	}
	// Held before it becomes visible, as in Load.
	s.lease(info.Digest)
	if _, err := w.Commit(info.Digest); err != nil {
		s.release(info.Digest)
		return LayerInfo{}, err
	}
	return info, nil
}

// ReleaseLayers lets garbage collection have layers from PutLayer that no
// image ended up using.
func (s *Service) ReleaseLayers(layers ...LayerInfo) {
	var hs []v1.Hash
	for _, l := range layers {
		hs = append(hs, l.Digest)
	}
	s.release(hs...)
	s.collect(hs)
}

// CreateImage stores cfg as a new image with layers (which must all be
// stored), writes an OCI manifest for it and returns its ID. parent, if
// not empty, is the image it was built from, as dockerd records it for
// `docker history`. cfg.RootFS is set from layers.
func (s *Service) CreateImage(ctx context.Context, cfg v1.ConfigFile, layers []LayerInfo, parent string) (string, error) {
	cfg.RootFS = v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{}}
	for _, l := range layers {
		if !s.blobs.Has(l.Digest) {
			return "", fmt.Errorf("create image: layer %s is not stored", l.Digest)
		}
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.DiffID)
	}
	rawCfg, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("encode image config: %w", err)
	}
	cfgHash, _, err := v1.SHA256(bytes.NewReader(rawCfg))
	if err != nil {
		return "", err
	}
	m := ociManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        ociDescriptor{MediaType: types.OCIConfigJSON, Digest: cfgHash, Size: int64(len(rawCfg))},
		Layers:        []ociDescriptor{},
	}
	recs := make([]layerRecord, len(layers))
	for i, l := range layers {
		recs[i] = l.record()
		m.Layers = append(m.Layers, ociDescriptor{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size})
	}
	rawManifest, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode manifest: %w", err)
	}
	mh, _, err := v1.SHA256(bytes.NewReader(rawManifest))
	if err != nil {
		return "", err
	}
	s.lease(cfgHash, mh)
	defer s.release(cfgHash, mh)
	if _, _, err := s.blobs.Put(bytes.NewReader(rawCfg), cfgHash); err != nil {
		return "", fmt.Errorf("store image config: %w", err)
	}
	if _, _, err := s.blobs.Put(bytes.NewReader(rawManifest), mh); err != nil {
		return "", fmt.Errorf("store manifest: %w", err)
	}
	id := cfgHash.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.images[id]; ok {
		// The same build step again: the image exists already.
		return old.ID, nil
	}
	parsed, err := v1.ParseConfigFile(bytes.NewReader(rawCfg))
	if err != nil {
		return "", fmt.Errorf("parse image config: %w", err)
	}
	r := &record{ID: id, Manifest: mh, Layers: recs, Added: time.Now().UTC(), Parent: parent, config: parsed}
	for _, l := range recs {
		r.Size += l.reportedSize()
	}
	if err := s.saveRecordLocked(r); err != nil {
		return "", err
	}
	s.images[id] = r
	return id, nil
}

// errNoParent ends a walk up the parent chain.
var errNoParent = errors.New("no parent image")

// parentOf returns the recorded parent of image id. Caller holds s.mu.
func (s *Service) parentLocked(id string) (*record, error) {
	r, ok := s.images[id]
	if !ok || r.Parent == "" {
		return nil, errNoParent
	}
	p, ok := s.images[r.Parent]
	if !ok {
		return nil, errNoParent
	}
	return p, nil
}

// parentsLocked is the set of images some other image was built from.
// Caller holds s.mu.
func (s *Service) parentsLocked() map[string]bool {
	out := map[string]bool{}
	for _, r := range s.images {
		if r.Parent != "" {
			out[r.Parent] = true
		}
	}
	return out
}

// pruneParentsLocked deletes the chain of build parents starting at id
// for as long as each is untagged, unused and nobody else's parent, as
// dockerd's rmi does unless told noprune. Caller holds s.mu.
func (s *Service) pruneParentsLocked(id string) []image.DeleteResponse {
	var out []image.DeleteResponse
	for id != "" {
		r, ok := s.images[id]
		if !ok || len(s.sortedRefsLocked(id)) > 0 || s.parentsLocked()[id] {
			break
		}
		if s.opts.InUse != nil && len(s.opts.InUse(id)) > 0 {
			break
		}
		if err := os.Remove(s.recordPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("remove parent image record", "id", id, "err", err)
			break
		}
		delete(s.images, id)
		out = append(out, image.DeleteResponse{Deleted: id})
		for _, chain := range s.releaseLayersLocked(r) {
			out = append(out, image.DeleteResponse{Deleted: chain})
		}
		id = r.Parent
	}
	return out
}
