package imagebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"

	"github.com/husk-vm/husk/imagebuild/reference"
)

// pushResult is the aux message that ends the push of one tag, as the
// docker CLI reads it.
type pushResult struct {
	Tag    string
	Digest string
	Size   int
}

// Push is POST /images/{name}/push: it uploads the image tagged name:tag
// (every tag of name when tag is "") to its registry, reporting progress in
// dockerd's shape: "The push refers to repository [...]", per layer
// Preparing, then Pushing/Pushed or "Layer already exists", and
// "<tag>: digest: <digest> size: <n>" with an aux result per tag. Layers go
// up as they are stored, so the pushed manifest is the stored one and its
// digest is the image's repo digest afterwards.
func (s *Service) Push(ctx context.Context, repo, tag string, auth *registry.AuthConfig, progress func(jsonstream.Message)) error {
	named, err := reference.Parse(repo)
	if err != nil {
		return err
	}
	out := &progressOut{fn: progress}
	out.status("", "The push refers to repository ["+named.Name()+"]")

	var tags []reference.Named
	s.mu.Lock()
	if tag != "" {
		t, err := reference.WithTag(named, tag)
		if err == nil {
			if _, ok := s.refs[t.String()]; ok {
				tags = append(tags, t)
			}
		}
	} else {
		for k := range s.refs {
			n, err := reference.Parse(k)
			if err == nil && n.Name() == named.Name() && !reference.IsDigested(n) {
				tags = append(tags, n)
			}
		}
	}
	s.mu.Unlock()
	if len(tags) == 0 {
		return errdefs.ErrNotFound.WithMessage("An image does not exist locally with the tag: " + reference.FamiliarName(named))
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i].String() < tags[j].String() })
	for _, t := range tags {
		if err := s.pushTag(ctx, t, auth, out); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) pushTag(ctx context.Context, t reference.Named, auth *registry.AuthConfig, out *progressOut) error {
	s.mu.Lock()
	r, err := s.resolveLocked(t.String())
	var rec record
	if err == nil {
		rec = *r
		rec.Layers = append([]layerRecord(nil), r.Layers...)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	// Hold the blobs: an rmi during the push must not take them.
	held := append(layerDigests(&rec), rec.Manifest)
	if h, err := v1.NewHash(rec.ID); err == nil {
		held = append(held, h)
	}
	s.lease(held...)
	defer s.release(held...)

	insecure := s.insecure(reference.Domain(t))
	rref, err := reference.Remote(t, insecure)
	if err != nil {
		return err
	}
	repo := rref.Context()
	rt := s.registryTransport()
	opts := s.remoteOptions(ctx, auth)
	img, err := s.storedImage(&rec)
	if err != nil {
		return err
	}

	for i := len(rec.Layers) - 1; i >= 0; i-- {
		out.send(jsonstream.Message{ID: shortID(rec.Layers[i].DiffID.String()), Status: "Preparing", Progress: &jsonstream.Progress{}})
	}
	client, err := blobChecker(ctx, repo, authenticator(auth), rt)
	if err != nil {
		return translatePushError(ctx, pingError(err, insecure), auth)
	}
	for i := len(rec.Layers) - 1; i >= 0; i-- {
		l := rec.Layers[i]
		id := shortID(l.DiffID.String())
		exists, err := client.has(ctx, l.Digest)
		if err != nil {
			return translatePushError(ctx, pingError(err, insecure), auth)
		}
		if exists {
			out.send(jsonstream.Message{ID: id, Status: "Layer already exists", Progress: &jsonstream.Progress{}})
			continue
		}
		layer, err := img.LayerByDigest(l.Digest)
		if err != nil {
			return fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		updates := make(chan v1.Update, 16)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for u := range updates {
				out.progress(id, "Pushing", u.Complete, l.Size)
			}
		}()
		err = remote.WriteLayer(repo, layer, append(opts, remote.WithProgress(updates))...)
		<-done
		if err != nil {
			return translatePushError(ctx, pingError(err, insecure), auth)
		}
		out.send(jsonstream.Message{ID: id, Status: "Pushed", Progress: &jsonstream.Progress{}})
	}
	// Write finds the layers there, uploads the config and puts the
	// manifest.
	if err := remote.Write(rref, img, opts...); err != nil {
		return translatePushError(ctx, pingError(err, insecure), auth)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	tag := reference.Tag(t)
	out.status("", fmt.Sprintf("%s: digest: %s size: %d", tag, rec.Manifest, len(raw)))
	aux, err := json.Marshal(pushResult{Tag: tag, Digest: rec.Manifest.String(), Size: len(raw)})
	if err != nil {
		return err
	}
	rm := json.RawMessage(aux)
	out.send(jsonstream.Message{Progress: &jsonstream.Progress{}, Aux: &rm})
	// As after a pull, name@digest now names the image.
	if _, err := s.setPulledRefs(t, rec.Manifest.String(), rec.ID); err != nil {
		s.log.Warn("record pushed digest", "ref", t.String(), "err", err)
	}
	return nil
}

// storedImage presents a stored image to go-containerregistry with its
// manifest, config and blobs exactly as stored, so that the pushed
// manifest has the digest the store knows.
func (s *Service) storedImage(r *record) (v1.Image, error) {
	raw, err := s.blobs.ReadAll(r.Manifest)
	if err != nil {
		return nil, err
	}
	h, err := v1.NewHash(r.ID)
	if err != nil {
		return nil, err
	}
	cfg, err := s.blobs.ReadAll(h)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(storedCore{s: s, manifest: raw, config: cfg, layers: r.Layers})
}

type storedCore struct {
	s        *Service
	manifest []byte
	config   []byte
	layers   []layerRecord
}

func (c storedCore) RawConfigFile() ([]byte, error) { return c.config, nil }
func (c storedCore) RawManifest() ([]byte, error)   { return c.manifest, nil }
func (c storedCore) MediaType() (types.MediaType, error) {
	return manifestMediaType(c.manifest), nil
}

func (c storedCore) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, l := range c.layers {
		if l.Digest == h {
			return storedLayer{s: c.s, l: l}, nil
		}
	}
	return nil, fmt.Errorf("blob %s is not a layer of this image", h)
}

type storedLayer struct {
	s *Service
	l layerRecord
}

func (l storedLayer) Digest() (v1.Hash, error)            { return l.l.Digest, nil }
func (l storedLayer) Size() (int64, error)                { return l.l.Size, nil }
func (l storedLayer) MediaType() (types.MediaType, error) { return l.l.MediaType, nil }
func (l storedLayer) Compressed() (io.ReadCloser, error)  { return l.s.blobs.Open(l.l.Digest) }

// blobClient asks a registry whether it has a blob, which
// go-containerregistry checks internally but does not report.
type blobClient struct {
	http *http.Client
	repo name.Repository
}

func blobChecker(ctx context.Context, repo name.Repository, auth authn.Authenticator, rt http.RoundTripper) (*blobClient, error) {
	tr, err := transport.NewWithContext(ctx, repo.Registry, auth, rt, []string{repo.Scope(transport.PushScope)})
	if err != nil {
		return nil, err
	}
	return &blobClient{http: &http.Client{Transport: tr}, repo: repo}, nil
}

func (c *blobClient) has(ctx context.Context, h v1.Hash) (bool, error) {
	u := url.URL{Scheme: c.repo.Registry.Scheme(), Host: c.repo.RegistryStr(), Path: fmt.Sprintf("/v2/%s/blobs/%s", c.repo.RepositoryStr(), h)}
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u.String(), nil)
	if err != nil {
		return false, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, transport.CheckError(resp, http.StatusOK, http.StatusNotFound)
}

// translatePushError words registry failures as dockerd does for a push.
func translatePushError(ctx context.Context, err error, auth *registry.AuthConfig) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if aerr, ok := registryAuthError(err, auth, ""); ok {
		return aerr
	}
	return err
}
