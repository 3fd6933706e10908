// Package imagebuild is husk's image service: pull, list, inspect, tag,
// remove, save and load, behaving as dockerd's classic image store does.
//
// Blobs (manifests, configs, compressed layers exactly as pulled) live in a
// content-addressed store (package store); what dockerd keeps in its image
// and reference stores is kept here as small JSON files written atomically:
// images/<config hex>.json per image and repositories.json for tags and
// digests. An image's ID is the digest of its config, as in dockerd.
//
// Registry access uses go-containerregistry. Progress is reported in
// dockerd's JSON-message shape so the docker CLI draws its usual per-layer
// bars. The archive writer for Save is our own (see archive.go) because
// go-containerregistry's tarball writer only produces the legacy layout and
// renames layer files, while dockerd 25+ writes an OCI layout alongside
// manifest.json with blobs byte-identical to those in the store.
package imagebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/renameio/v2"

	"github.com/husk-vm/husk/imagebuild/reference"
	"github.com/husk-vm/husk/imagebuild/store"
)

// Options configures a Service.
type Options struct {
	// Root holds blobs and metadata, e.g. /var/lib/husk/images.
	Root string
	// InsecureRegistries ("host[:port]") may be reached over plain HTTP.
	// Like dockerd, 127.0.0.0/8 and localhost always may.
	InsecureRegistries []string
	// InUse lists the containers using an image, for rmi conflicts. May
	// be nil.
	InUse func(imageID string) []string
	// Running lists the running (or paused) ones among them: a conflict
	// force does not override. May be nil.
	Running func(imageID string) []string
	Logger  *slog.Logger
}

// Image is a stored image as the rest of husk sees it.
type Image struct {
	ID          string // "sha256:<hex>", the config digest
	Config      v1.ConfigFile
	RepoTags    []string
	RepoDigests []string
}

// Service is the image store. Its methods are safe for concurrent use.
type Service struct {
	opts  Options
	log   *slog.Logger
	blobs *store.Store

	mu     sync.Mutex
	images map[string]*record // by ID
	refs   map[string]string  // normalised reference → image ID
	// leases counts in-flight operations holding a blob that no image
	// record references yet, so garbage collection leaves it alone.
	leases map[v1.Hash]int
}

// record is what is persisted per image.
type record struct {
	ID       string        `json:"id"`
	Manifest v1.Hash       `json:"manifest"`
	Layers   []layerRecord `json:"layers"`
	// Size is the sum of the uncompressed layer sizes, dockerd's "Size".
	Size        int64     `json:"size"`
	Added       time.Time `json:"added"`
	LastTagTime time.Time `json:"lastTagTime,omitzero"`
	// Parent is the image a build step started from ("" for pulled and
	// loaded images), which dockerd shows in history and inspect.
	Parent string `json:"parent,omitempty"`

	config *v1.ConfigFile
}

type layerRecord struct {
	Digest           v1.Hash         `json:"digest"`
	MediaType        types.MediaType `json:"mediaType"`
	Size             int64           `json:"size"`
	DiffID           v1.Hash         `json:"diffID"`
	UncompressedSize int64           `json:"uncompressedSize"`
	// ContentSize is the size dockerd reports for the layer (see
	// contentSize); records written before it was kept lack it.
	ContentSize *int64 `json:"contentSize,omitempty"`
}

// reportedSize is the layer's size as image sizes, history and disk usage
// show it.
func (l layerRecord) reportedSize() int64 {
	if l.ContentSize != nil {
		return *l.ContentSize
	}
	return l.UncompressedSize
}

// New opens (creating if needed) the image store under opts.Root.
func New(opts Options) (*Service, error) {
	if opts.Root == "" {
		return nil, errors.New("imagebuild: Options.Root is empty")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(opts.Root, "images"), 0o700); err != nil {
		return nil, fmt.Errorf("create image dir: %w", err)
	}
	blobs, err := store.New(opts.Root)
	if err != nil {
		return nil, err
	}
	if err := resetUnpacked(opts.Root); err != nil {
		return nil, err
	}
	s := &Service{
		opts:   opts,
		log:    log,
		blobs:  blobs,
		images: map[string]*record{},
		refs:   map[string]string{},
		leases: map[v1.Hash]int{},
	}
	if err := s.loadState(); err != nil {
		return nil, err
	}
	return s, nil
}

// Blobs exposes the content store, e.g. for the Dockerfile builder.
func (s *Service) Blobs() *store.Store { return s.blobs }

func (s *Service) loadState() error {
	dir := filepath.Join(s.opts.Root, "images")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read image records: %w", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("read image record %s: %w", e.Name(), err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("decode image record %s: %w", e.Name(), err)
		}
		cfg, err := s.readConfig(r.ID)
		if err != nil {
			s.log.Warn("skipping image whose config is unreadable", "id", r.ID, "err", err)
			continue
		}
		r.config = cfg
		s.images[r.ID] = &r
	}
	b, err := os.ReadFile(filepath.Join(s.opts.Root, "repositories.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read references: %w", err)
	}
	if err := json.Unmarshal(b, &s.refs); err != nil {
		return fmt.Errorf("decode references: %w", err)
	}
	for ref, id := range s.refs {
		if _, ok := s.images[id]; !ok {
			delete(s.refs, ref)
		}
	}
	return nil
}

func (s *Service) readConfig(id string) (*v1.ConfigFile, error) {
	h, err := v1.NewHash(id)
	if err != nil {
		return nil, fmt.Errorf("image id %q: %w", id, err)
	}
	f, err := s.blobs.Open(h)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg, err := v1.ParseConfigFile(f)
	if err != nil {
		return nil, fmt.Errorf("parse config %s: %w", id, err)
	}
	return cfg, nil
}

// saveRecordLocked persists r. Caller holds s.mu.
func (s *Service) saveRecordLocked(r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode image record %s: %w", r.ID, err)
	}
	return writeFileAtomic(s.recordPath(r.ID), b)
}

func (s *Service) recordPath(id string) string {
	return filepath.Join(s.opts.Root, "images", strings.TrimPrefix(id, "sha256:")+".json")
}

// saveRefsLocked persists the reference table. Caller holds s.mu.
func (s *Service) saveRefsLocked() error {
	b, err := json.Marshal(s.refs)
	if err != nil {
		return fmt.Errorf("encode references: %w", err)
	}
	return writeFileAtomic(filepath.Join(s.opts.Root, "repositories.json"), b)
}

func writeFileAtomic(path string, b []byte) error {
	if err := renameio.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("open dir of %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir of %s: %w", path, err)
	}
	return nil
}

// refsOfLocked returns the familiar tags and digests pointing at id,
// sorted as dockerd sorts them. Caller holds s.mu.
func (s *Service) refsOfLocked(id string) (tags, digests []string) {
	tags, digests = []string{}, []string{}
	for ref, target := range s.refs {
		if target != id {
			continue
		}
		n, err := reference.Parse(ref)
		if err != nil {
			continue
		}
		if reference.IsDigested(n) {
			digests = append(digests, reference.Familiar(n))
		} else {
			tags = append(tags, reference.Familiar(n))
		}
	}
	sort.Strings(tags)
	sort.Strings(digests)
	return tags, digests
}

// Resolve finds an image by name[:tag], name@digest, full or short ID, or
// "sha256:" ID prefix, the way dockerd's GetImage does.
func (s *Service) Resolve(ctx context.Context, ref string) (*Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.resolveLocked(ref)
	if err != nil {
		return nil, err
	}
	tags, digests := s.refsOfLocked(r.ID)
	return &Image{ID: r.ID, Config: *r.config, RepoTags: tags, RepoDigests: digests}, nil
}

// resolveLocked follows dockerd's order: full ID, then reference, then ID
// prefix. Caller holds s.mu.
func (s *Service) resolveLocked(ref string) (*record, error) {
	if ref == "" {
		return nil, errdefs.ErrInvalidArgument.WithMessage("invalid reference format")
	}
	if isHex64(ref) {
		if r, ok := s.images["sha256:"+ref]; ok {
			return r, nil
		}
		return nil, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	if strings.HasPrefix(ref, "sha256:") {
		if r := s.searchIDLocked(strings.TrimPrefix(ref, "sha256:")); r != nil {
			return r, nil
		}
		return nil, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	n, err := reference.ParseWithDefaultTag(ref)
	if err != nil {
		return nil, err
	}
	if id, ok := s.refs[n.String()]; ok {
		if r, ok := s.images[id]; ok {
			return r, nil
		}
	}
	if r := s.searchIDLocked(ref); r != nil {
		return r, nil
	}
	return nil, errdefs.ErrNotFound.WithMessage("No such image: " + reference.Familiar(n))
}

// searchIDLocked finds the one image whose ID hex starts with prefix; an
// ambiguous prefix finds nothing, as in dockerd.
func (s *Service) searchIDLocked(prefix string) *record {
	if prefix == "" || !isHex(prefix) {
		return nil
	}
	var found *record
	for id, r := range s.images {
		if strings.HasPrefix(strings.TrimPrefix(id, "sha256:"), prefix) {
			if found != nil {
				return nil
			}
			found = r
		}
	}
	return found
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func isHex64(s string) bool { return len(s) == 64 && isHex(s) }

// shortID is dockerd's TruncateID: 12 hex digits without the algorithm.
func shortID(id string) string {
	if i := strings.IndexByte(id, ':'); i >= 0 {
		id = id[i+1:]
	}
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}

// Layers returns openers for the image's layers as uncompressed tars, base
// first. The blobs stay on disk while the image exists; a caller racing an
// rmi of the same image may find them gone.
func (s *Service) Layers(ctx context.Context, imageID string) ([]func() (io.ReadCloser, error), error) {
	s.mu.Lock()
	r, err := s.resolveLocked(imageID)
	var layers []layerRecord
	if err == nil {
		layers = append(layers, r.Layers...)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make([]func() (io.ReadCloser, error), 0, len(layers))
	for _, l := range layers {
		out = append(out, func() (io.ReadCloser, error) {
			if rc, ok := s.openUnpacked(l.Digest, l.UncompressedSize); ok {
				return rc, nil
			}
			return s.openLayer(l.Digest)
		})
	}
	return out, nil
}

// openLayer opens a stored layer blob as its uncompressed tar.
func (s *Service) openLayer(digest v1.Hash) (io.ReadCloser, error) {
	f, err := s.blobs.Open(digest)
	if err != nil {
		return nil, fmt.Errorf("open layer %s: %w", digest, err)
	}
	rc, err := decompress(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("decompress layer %s: %w", digest, err)
	}
	return rc, nil
}
