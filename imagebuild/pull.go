package imagebuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"

	"github.com/husk-vm/husk/imagebuild/reference"
)

// maxConcurrentDownloads is dockerd's default max-concurrent-downloads.
const maxConcurrentDownloads = 3

// progressEvery is how many bytes pass between progress messages, as in
// dockerd's progress reader.
const progressEvery = 512 << 10

// Pull fetches ref ("alpine:3", "localhost:5000/x:1", "x@sha256:…") for
// platform ("" means linux/amd64) and reports progress in dockerd's
// message shapes. A ref with neither tag nor digest pulls every tag of the
// repository, as dockerd does (`docker pull -a` sends one; so may an SDK
// or curl that leaves out the tag). Errors before the first progress
// message carry dockerd's wording and an errdefs class.
func (s *Service) Pull(ctx context.Context, ref, platform string, auth *registry.AuthConfig, progress func(jsonstream.Message)) error {
	named, err := reference.Parse(ref)
	if err != nil {
		return err
	}
	want, err := parsePlatform(platform)
	if err != nil {
		return err
	}
	out := &progressOut{fn: progress}
	var changed bool
	var got v1.Platform
	if reference.IsNameOnly(named) {
		changed, err = s.pullAllTags(ctx, named, want, auth, out)
	} else {
		changed, got, err = s.pullTag(ctx, named, want, auth, out)
	}
	if err != nil {
		return err
	}
	if changed {
		out.status("", "Status: Downloaded newer image for "+reference.Familiar(named))
	} else {
		out.status("", "Status: Image is up to date for "+reference.Familiar(named))
	}
	// A single-platform image is pulled whatever its platform, as dockerd
	// pulls it, and dockerd then warns that it does not match.
	if platform != "" && got.OS != "" && !platformMatches(got, *want) {
		out.status("", fmt.Sprintf("WARNING: image with reference %s was found but does not match the specified platform: wanted %s, actual: %s",
			reference.FamiliarName(named), formatPlatform(*want), formatPlatform(got)))
	}
	return nil
}

func platformMatches(p, want v1.Platform) bool {
	return p.OS == want.OS && p.Architecture == want.Architecture && (want.Variant == "" || p.Variant == want.Variant)
}

// formatPlatform is containerd's platforms.Format: os/arch[/variant].
func formatPlatform(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// pullAllTags pulls each tag the registry lists for named's repository, in
// the registry's order, and reports whether any of them changed.
func (s *Service) pullAllTags(ctx context.Context, named reference.Named, want *v1.Platform, auth *registry.AuthConfig, out *progressOut) (bool, error) {
	domain := reference.Domain(named)
	rref, err := reference.Remote(named, s.insecure(domain))
	if err != nil {
		return false, err
	}
	tags, err := remote.List(rref.Context(), s.remoteOptions(ctx, auth)...)
	if err != nil {
		return false, translatePullError(ctx, pingError(err, s.insecure(domain)), named)
	}
	var changed bool
	for _, tag := range tags {
		tagged, err := reference.WithTag(named, tag)
		if err != nil {
			return false, err
		}
		c, _, err := s.pullTag(ctx, tagged, want, auth, out)
		if err != nil {
			return false, err
		}
		changed = changed || c
	}
	return changed, nil
}

// pullTag fetches one tag or digest and points its references at the
// image, reporting whether they moved and the image's platform.
func (s *Service) pullTag(ctx context.Context, named reference.Named, want *v1.Platform, auth *registry.AuthConfig, out *progressOut) (changed bool, got v1.Platform, err error) {
	domain := reference.Domain(named)
	rref, err := reference.Remote(named, s.insecure(domain))
	if err != nil {
		return false, got, err
	}
	opts := append(s.remoteOptions(ctx, auth), remote.WithPlatform(*want))
	desc, err := remote.Get(rref, opts...)
	if err != nil {
		if ctx.Err() == nil {
			if aerr, ok := registryAuthError(err, auth, manifestURL(rref)); ok {
				return false, got, aerr
			}
		}
		return false, got, translatePullError(ctx, pingError(err, s.insecure(domain)), named)
	}

	tagOrDigest := reference.Tag(named)
	if reference.IsDigested(named) {
		tagOrDigest = reference.Digest(named)
	}
	out.status(tagOrDigest, "Pulling from "+reference.Path(named))

	img, err := pickImage(desc, want)
	if err != nil {
		return false, got, err
	}
	id, err := s.fetchImage(ctx, img, out)
	if err != nil {
		return false, got, err
	}
	out.status("", "Digest: "+desc.Digest.String())
	if cf, err := img.ConfigFile(); err == nil && cf.Platform() != nil {
		got = *cf.Platform()
	}
	changed, err = s.setPulledRefs(named, desc.Digest.String(), id)
	return changed, got, err
}

// pickImage resolves an index to the manifest for want, as dockerd does
// for manifest lists.
func pickImage(desc *remote.Descriptor, want *v1.Platform) (v1.Image, error) {
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return nil, fmt.Errorf("read image manifest: %w", err)
		}
		return img, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("read manifest list: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read manifest list: %w", err)
	}
	for _, m := range im.Manifests {
		if m.Platform == nil || !m.MediaType.IsImage() {
			continue
		}
		p := m.Platform
		if p.OS == want.OS && p.Architecture == want.Architecture && (want.Variant == "" || p.Variant == want.Variant) {
			img, err := idx.Image(m.Digest)
			if err != nil {
				return nil, fmt.Errorf("read image manifest %s: %w", m.Digest, err)
			}
			return img, nil
		}
	}
	return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("no matching manifest for %s in the manifest list entries", want))
}

// fetchImage stores img's manifest, config and layers and its record, and
// returns its ID.
func (s *Service) fetchImage(ctx context.Context, img v1.Image, out *progressOut) (string, error) {
	rawManifest, err := img.RawManifest()
	if err != nil {
		return "", fmt.Errorf("read manifest: %w", err)
	}
	manifest, err := img.Manifest()
	if err != nil {
		return "", fmt.Errorf("parse manifest: %w", err)
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return "", fmt.Errorf("fetch image config %s: %w", manifest.Config.Digest, err)
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawConfig))
	if err != nil {
		return "", fmt.Errorf("parse image config %s: %w", manifest.Config.Digest, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(manifest.Layers) {
		return "", errors.New("layers from manifest don't match image configuration")
	}

	manifestDigest, _, err := v1.SHA256(bytes.NewReader(rawManifest))
	if err != nil {
		return "", fmt.Errorf("hash manifest: %w", err)
	}
	// Lease everything before looking at what is already stored, so that a
	// concurrent rmi cannot collect a blob this pull counts on.
	held := []v1.Hash{manifestDigest, manifest.Config.Digest}
	for _, l := range manifest.Layers {
		held = append(held, l.Digest)
	}
	s.lease(held...)
	defer s.release(held...)

	if _, _, err := s.blobs.Put(bytes.NewReader(rawManifest), manifestDigest); err != nil {
		return "", fmt.Errorf("store manifest: %w", err)
	}
	if _, _, err := s.blobs.Put(bytes.NewReader(rawConfig), manifest.Config.Digest); err != nil {
		return "", fmt.Errorf("image config verification failed for digest %s: %w", manifest.Config.Digest, err)
	}

	// Like dockerd, say nothing per layer when the image is already here:
	// a re-pull prints only its Digest and Status lines.
	layerOut := out
	s.mu.Lock()
	_, have := s.images[manifest.Config.Digest.String()]
	s.mu.Unlock()
	if have {
		layerOut = nil
	}
	layers, err := s.fetchLayers(ctx, img, manifest, cfg, layerOut)
	if err != nil {
		return "", err
	}
	return s.commitImage(manifest.Config.Digest.String(), manifestDigest, layers, cfg)
}

// commitImage records an image whose blobs are all stored and returns its
// ID. An image already present keeps its history.
func (s *Service) commitImage(id string, manifest v1.Hash, layers []layerRecord, cfg *v1.ConfigFile) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &record{ID: id, Manifest: manifest, Layers: layers, Added: time.Now().UTC(), config: cfg}
	if old, ok := s.images[id]; ok {
		r.Added, r.LastTagTime = old.Added, old.LastTagTime
	}
	for _, l := range layers {
		r.Size += l.reportedSize()
	}
	if err := s.saveRecordLocked(r); err != nil {
		return "", err
	}
	s.images[id] = r
	return id, nil
}

// setPulledRefs points the pulled reference (and, for a tag, name@digest)
// at id and reports whether the reference changed, which is what dockerd's
// "Downloaded newer image" means.
func (s *Service) setPulledRefs(named reference.Named, manifestDigest, id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := named.String()
	changed := s.refs[key] != id
	s.refs[key] = id
	if !reference.IsDigested(named) {
		dref, err := reference.WithDigest(named, manifestDigest)
		if err != nil {
			return false, err
		}
		// Like dockerd, an existing digest reference is never re-pointed.
		if _, ok := s.refs[dref.String()]; !ok {
			s.refs[dref.String()] = id
		}
	}
	if err := s.saveRefsLocked(); err != nil {
		return false, err
	}
	return changed, nil
}

type fetched struct {
	done chan struct{}
	err  error
}

// fetchLayers downloads the missing layers (at most three at a time) and
// then checks each, in order, against the config's diffIDs.
func (s *Service) fetchLayers(ctx context.Context, img v1.Image, m *v1.Manifest, cfg *v1.ConfigFile, out *progressOut) ([]layerRecord, error) {
	recs := make([]layerRecord, len(m.Layers))
	known := make([]bool, len(m.Layers))
	for i, d := range m.Layers {
		recs[i] = layerRecord{Digest: d.Digest, MediaType: d.MediaType, Size: d.Size, DiffID: cfg.RootFS.DiffIDs[i]}
		if s.blobs.Has(d.Digest) {
			known[i] = true
			out.status(shortID(d.Digest.String()), "Already exists")
		}
	}
	var missing []int
	for i := range m.Layers {
		if !known[i] {
			missing = append(missing, i)
			out.status(shortID(m.Layers[i].Digest.String()), "Pulling fs layer")
		}
	}
	for n, i := range missing {
		if n >= maxConcurrentDownloads {
			out.status(shortID(m.Layers[i].Digest.String()), "Waiting")
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]*fetched, len(m.Layers))
	sem := make(chan struct{}, maxConcurrentDownloads)
	var wg sync.WaitGroup
	for _, i := range missing {
		f := &fetched{done: make(chan struct{})}
		results[i] = f
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(f.done)
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				f.err = ctx.Err()
				return
			}
			defer func() { <-sem }()
			f.err = s.download(ctx, img, m.Layers[i], out)
		}()
	}
	defer wg.Wait()

	for i := range m.Layers {
		id := shortID(m.Layers[i].Digest.String())
		if known[i] {
			known, ok := s.knownDiff(recs[i].Digest, recs[i].DiffID)
			if !ok {
				var err error
				if known, err = s.checkDiffID(ctx, recs[i], nil, false); err != nil {
					return nil, err
				}
			}
			recs[i].UncompressedSize, recs[i].ContentSize = known.UncompressedSize, known.ContentSize
			continue
		}
		select {
		case <-results[i].done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if err := results[i].err; err != nil {
			return nil, err
		}
		sizes, err := s.checkDiffID(ctx, recs[i], func(cur int64) {
			out.progress(id, "Extracting", cur, recs[i].Size)
		}, true)
		if err != nil {
			return nil, err
		}
		recs[i].UncompressedSize, recs[i].ContentSize = sizes.UncompressedSize, sizes.ContentSize
		out.status(id, "Pull complete")
	}
	return recs, nil
}

// download stores one layer blob, verifying its digest.
func (s *Service) download(ctx context.Context, img v1.Image, d v1.Descriptor, out *progressOut) error {
	id := shortID(d.Digest.String())
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return fmt.Errorf("layer %s: %w", d.Digest, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("download layer %s: %w", d.Digest, err)
	}
	defer rc.Close()
	w, err := s.blobs.Create()
	if err != nil {
		return err
	}
	defer w.Close()
	pw := &progressWriter{w: w, progressCounter: progressCounter{report: func(cur int64) {
		out.progress(id, "Downloading", cur, d.Size)
	}}}
	if _, err := io.Copy(pw, ctxReader{ctx: ctx, r: rc}); err != nil {
		return fmt.Errorf("download layer %s: %w", d.Digest, err)
	}
	pw.flush()
	out.status(id, "Verifying Checksum")
	if _, err := w.Commit(d.Digest); err != nil {
		return fmt.Errorf("filesystem layer verification failed for digest %s: %w", d.Digest, err)
	}
	out.status(id, "Download complete")
	return nil
}

// knownDiff returns the sizes recorded for a blob by another
// image, if that image agrees on its diffID.
func (s *Service) knownDiff(blob, diffID v1.Hash) (layerSizes, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.images {
		for _, l := range r.Layers {
			if l.Digest == blob && l.DiffID == diffID {
				return layerSizes{l.UncompressedSize, l.ContentSize}, true
			}
		}
	}
	return layerSizes{}, false
}

// layerSizes are what reading a layer's tar tells about it.
type layerSizes struct {
	UncompressedSize int64
	ContentSize      *int64 // nil when the tar could not be read as one
}

// checkDiffID decompresses a stored layer, checks the digest of the tar
// against l.DiffID and returns the tar's sizes. report, if set, sees the
// compressed bytes consumed. With cache, the tar is also kept in the
// unpacked cache (unpacked.go) once its digest checked out; a failure to
// cache it costs only speed.
func (s *Service) checkDiffID(ctx context.Context, l layerRecord, report func(cur int64), cache bool) (layerSizes, error) {
	f, err := s.blobs.Open(l.Digest)
	if err != nil {
		return layerSizes{}, err
	}
	defer f.Close()
	var src io.Reader = f
	var pr *progressReader
	if report != nil {
		pr = &progressReader{r: f, progressCounter: progressCounter{report: report}}
		src = pr
	}
	rc, err := decompress(io.NopCloser(src))
	if err != nil {
		return layerSizes{}, fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	defer rc.Close()
	h := sha256.New()
	content := newContentSize()
	defer content.abort() // a no-op after result
	var sink io.Writer = io.MultiWriter(h, content)
	var unpacked *unpackedWriter
	if cache {
		if unpacked, err = s.newUnpacked(l.Digest); err != nil {
			s.log.Warn("layer not cached unpacked", "digest", l.Digest, "err", err)
		} else {
			defer unpacked.discard() // a no-op after keep
			sink = io.MultiWriter(h, content, unpacked)
		}
	}
	n, err := io.Copy(sink, ctxReader{ctx: ctx, r: rc})
	if err != nil {
		return layerSizes{}, fmt.Errorf("read layer %s: %w", l.Digest, err)
	}
	if pr != nil {
		pr.flush()
	}
	got := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	if got != l.DiffID {
		return layerSizes{}, fmt.Errorf("invalid diffID for layer %s: expected %q, got %q", l.Digest, l.DiffID, got)
	}
	if unpacked != nil {
		if err := unpacked.keep(); err != nil {
			s.log.Warn("layer not cached unpacked", "digest", l.Digest, "err", err)
		}
	}
	sizes := layerSizes{UncompressedSize: n}
	if c, err := content.result(); err == nil {
		sizes.ContentSize = &c
	} else {
		s.log.Warn("layer size reported as its tar's", "digest", l.Digest, "err", err)
	}
	return sizes, nil
}

func (s *Service) lease(hs ...v1.Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hs {
		s.leases[h]++
	}
}

func (s *Service) release(hs ...v1.Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hs {
		if s.leases[h]--; s.leases[h] <= 0 {
			delete(s.leases, h)
		}
	}
}

func parsePlatform(p string) (*v1.Platform, error) {
	if p == "" {
		return &v1.Platform{OS: "linux", Architecture: "amd64"}, nil
	}
	pl, err := v1.ParsePlatform(p)
	if err != nil || pl.OS == "" || pl.Architecture == "" {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%q: unknown operating system or architecture: invalid argument", p))
	}
	return pl, nil
}

func authenticator(a *registry.AuthConfig) authn.Authenticator {
	if anonymous(a) {
		return authn.Anonymous
	}
	return authn.FromConfig(authn.AuthConfig{
		Username:      a.Username,
		Password:      a.Password,
		Auth:          a.Auth,
		IdentityToken: a.IdentityToken,
		RegistryToken: a.RegistryToken,
	})
}

// insecure reports whether host[:port] may be spoken to over plain HTTP:
// listed in Options.InsecureRegistries (by name or CIDR), or loopback.
func (s *Service) insecure(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip != nil && ip.IsLoopback() {
		return true
	}
	for _, r := range s.opts.InsecureRegistries {
		if r == hostport || r == host {
			return true
		}
		if _, cidr, err := net.ParseCIDR(r); err == nil && ip != nil && cidr.Contains(ip) {
			return true
		}
	}
	return false
}

// registryTransport is how husk reaches a registry: go-containerregistry's
// transport, behind httpGuard.
func (s *Service) registryTransport() http.RoundTripper {
	return httpGuard{s: s, next: remote.DefaultTransport}
}

// remoteOptions are the go-containerregistry options of every registry
// call: ctx, the client's credentials and registryTransport.
func (s *Service) remoteOptions(ctx context.Context, auth *registry.AuthConfig) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(authenticator(auth)), remote.WithTransport(s.registryTransport())}
}

// httpGuard refuses plain HTTP to registries not marked insecure.
// go-containerregistry falls back to HTTP on its own for private (RFC 1918)
// addresses; dockerd does not, and neither do we.
type httpGuard struct {
	s    *Service
	next http.RoundTripper
}

func (g httpGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !g.s.insecure(req.URL.Host) {
		return nil, fmt.Errorf("refusing plain HTTP to %s: not an insecure registry", req.URL.Host)
	}
	return g.next.RoundTrip(req)
}

// translatePullError gives registry errors dockerd's wording and class.
func translatePullError(ctx context.Context, err error, named reference.Named) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var terr *transport.Error
	if !errors.As(err, &terr) {
		// Transport failures (connection refused, TLS) already name the
		// URL being fetched, as dockerd's do.
		return err
	}
	if len(terr.Errors) > 0 {
		d := terr.Errors[0]
		cause := registryCause(d)
		switch d.Code {
		case transport.ManifestUnknownErrorCode:
			return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("manifest for %s not found: %s", reference.Familiar(named), cause))
		case transport.NameUnknownErrorCode:
			return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("repository %s not found: %s", reference.FamiliarName(named), cause))
		case transport.DeniedErrorCode:
			return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("pull access denied for %s, repository does not exist or may require 'docker login': %s", reference.FamiliarName(named), cause))
		case transport.UnauthorizedErrorCode:
			return errdefs.ErrUnauthenticated.WithMessage(cause)
		}
	}
	switch terr.StatusCode {
	case http.StatusUnauthorized:
		return errdefs.ErrUnauthenticated.WithMessage("unauthorized: authentication required")
	case http.StatusNotFound:
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("manifest for %s not found: manifest unknown: manifest unknown", reference.Familiar(named)))
	}
	return err
}

// registryCause words a registry's error as distribution's client does
// ("manifest unknown: manifest unknown").
func registryCause(d transport.Diagnostic) string {
	return strings.ToLower(strings.ReplaceAll(string(d.Code), "_", " ")) + ": " + d.Message
}

// progressOut serialises progress messages from concurrent downloads.
type progressOut struct {
	mu sync.Mutex
	fn func(jsonstream.Message)
}

func (p *progressOut) send(m jsonstream.Message) {
	if p == nil || p.fn == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fn(m)
}

func (p *progressOut) status(id, status string) {
	p.send(jsonstream.Message{ID: id, Status: status})
}

func (p *progressOut) progress(id, action string, current, total int64) {
	p.send(jsonstream.Message{ID: id, Status: action, Progress: &jsonstream.Progress{Current: current, Total: total}})
}

// progressCounter reports a running byte count every progressEvery bytes.
type progressCounter struct {
	n, last int64
	report  func(cur int64)
}

func (p *progressCounter) add(n int) {
	p.n += int64(n)
	if p.n-p.last >= progressEvery {
		p.last = p.n
		p.report(p.n)
	}
}

// flush reports the final count unless it was just reported.
func (p *progressCounter) flush() {
	if p.n != p.last || p.n == 0 {
		p.last = p.n
		p.report(p.n)
	}
}

// progressWriter counts bytes written.
type progressWriter struct {
	w io.Writer
	progressCounter
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.add(n)
	return n, err
}

// progressReader counts bytes read.
type progressReader struct {
	r io.Reader
	progressCounter
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.add(n)
	return n, err
}

// ctxReader stops a long copy when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}
