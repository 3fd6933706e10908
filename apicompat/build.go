package apicompat

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"
	"github.com/ulikunitz/xz"

	"github.com/husk-vm/husk/imagebuild/builder"
)

// Builder runs Dockerfile builds for POST /build.
type Builder interface {
	Build(ctx context.Context, opts builder.BuildOptions, out builder.Output) (string, error)
}

// BuildKit is what POST /grpc and POST /session need: each upgrades its
// connection and serves it until the client is done.
type BuildKit interface {
	ServeGRPC(w http.ResponseWriter, r *http.Request) error
	ServeSession(ctx context.Context, w http.ResponseWriter, r *http.Request) error
}

func (s *server) postGRPC(_ context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if err := s.cfg.BuildKit.ServeGRPC(w, r); err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	return nil
}

func (s *server) postSession(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if err := s.cfg.BuildKit.ServeSession(ctx, w, r); err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	return nil
}

// imageHistory and imagePusher are what GET /images/{name}/history and
// POST /images/{name}/push need of the image backend. They are optional:
// a backend without them answers 501.
type imageHistory interface {
	History(ctx context.Context, ref string) ([]image.HistoryResponseItem, error)
}

type imagePusher interface {
	// Push uploads repo:tag (every tag of repo when tag is "") and reports
	// progress as dockerd does.
	Push(ctx context.Context, repo, tag string, auth *registry.AuthConfig, progress func(jsonstream.Message)) error
}

// postBuild is POST /build, dockerd's classic builder endpoint: the body
// is the context as a tar (plain, gzip, bzip2, xz or zstd); the answer is
// the JSON stream the docker CLI prints.
func (s *server) postBuild(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if s.cfg.Builder == nil {
		return errdefs.ErrNotImplemented.WithMessage("this daemon does not build images")
	}
	if err := parseForm(r); err != nil {
		return err
	}
	if r.Form.Get("version") == "2" {
		return errdefs.ErrInvalidArgument.WithMessage("buildkit is not supported by husk: use the classic builder (DOCKER_BUILDKIT=0)")
	}
	opts := builder.BuildOptions{
		Dockerfile:  r.Form.Get("dockerfile"),
		Tags:        r.Form["t"],
		Target:      r.Form.Get("target"),
		NoCache:     boolValue(r, "nocache"),
		Pull:        boolValue(r, "pull"),
		Quiet:       boolValue(r, "q"),
		ForceRemove: boolValue(r, "forcerm"),
		Platform:    r.Form.Get("platform"),
		Remote:      r.Form.Get("remote"),
		Network:     builder.SandboxNetwork{Mode: r.Form.Get("networkmode"), ExtraHosts: r.Form["extrahosts"]},
	}
	// As dockerd: forcerm implies rm, and rm defaults to true.
	opts.Remove = opts.ForceRemove || boolValueOrDefault(r, "rm", true)
	if v := r.Form.Get("buildargs"); v != "" {
		if err := json.Unmarshal([]byte(v), &opts.BuildArgs); err != nil {
			return errdefs.ErrInvalidArgument.WithMessage("error reading build args: " + err.Error())
		}
	}
	if v := r.Form.Get("labels"); v != "" {
		if err := json.Unmarshal([]byte(v), &opts.Labels); err != nil {
			return errdefs.ErrInvalidArgument.WithMessage("error reading labels: " + err.Error())
		}
	}
	if p := opts.Platform; p != "" && p != "linux" && p != "linux/amd64" {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%q: husk builds only linux/amd64 images", p))
	}
	opts.Auth = registryConfig(r.Header.Get("X-Registry-Config"))
	body, err := decompressStream(r.Body, "read build context")
	if err != nil {
		return err
	}
	opts.Context = body

	if id := r.Form.Get("buildid"); id != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer s.builds.track(id, cancel)()
	}

	w.Header().Set("Content-Type", "application/json")
	out := &jsonProgress{w: w}
	// With -q dockerd keeps the build's output (the image ID's aux line
	// too) back, and sends it, then the error, only if the build fails;
	// a build that succeeds answers with the ID alone.
	var (
		heldMu sync.Mutex
		held   []jsonstream.Message
	)
	progress := out.message
	if opts.Quiet {
		progress = func(m jsonstream.Message) {
			heldMu.Lock()
			defer heldMu.Unlock()
			held = append(held, m)
		}
	}
	id, err := s.cfg.Builder.Build(ctx, opts, builder.Output{
		Stream: func(s string) { progress(jsonstream.Message{Stream: s}) },
		Aux: func(id string) {
			raw := json.RawMessage(fmt.Sprintf(`{"ID":%q}`, id))
			progress(jsonstream.Message{Aux: &raw})
		},
		Progress: progress,
	})
	if err != nil && ctx.Err() != nil {
		// Cancelled (POST /build/cancel, or the client went): whatever
		// step was cut short, the cause is the cancel, as BuildKit says.
		err = ctx.Err()
	}
	if opts.Quiet {
		if err == nil {
			out.write(jsonstream.Message{Stream: id + "\n"})
		} else {
			heldMu.Lock()
			for _, m := range held {
				out.write(m)
			}
			heldMu.Unlock()
		}
	}
	var exit *builder.ExitError
	if errors.As(err, &exit) {
		// The code lets the CLI exit with the command's status.
		out.write(streamError{Detail: jsonstream.Error{Code: exit.Code, Message: err.Error()}, Error: err.Error()})
		err = nil
	}
	return out.finish(err, false)
}

// postBuildCancel is POST /build/cancel?id=X: it stops the build that
// named itself X with buildid. dockerd cancels BuildKit builds so and
// ignores the id of a classic one; husk's builds are all classic, and a
// client that names its build expects the cancel to stop it.
func (s *server) postBuildCancel(_ context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	w.Header().Set("Content-Type", "application/json")
	if err := parseForm(r); err != nil {
		return err
	}
	id := r.Form.Get("id")
	if id == "" {
		return errdefs.ErrInvalidArgument.WithMessage("build ID not provided")
	}
	s.builds.cancel(id)
	w.WriteHeader(http.StatusOK)
	return nil
}

// buildCancels holds the cancel of each running build that has an id;
// builds may share one, and a cancel stops them all.
type buildCancels struct {
	mu   sync.Mutex
	next int
	byID map[string]map[int]context.CancelFunc
}

// track registers cancel under id until the returned func is called.
func (b *buildCancels) track(id string, cancel context.CancelFunc) (done func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byID == nil {
		b.byID = map[string]map[int]context.CancelFunc{}
	}
	if b.byID[id] == nil {
		b.byID[id] = map[int]context.CancelFunc{}
	}
	k := b.next
	b.next++
	b.byID[id][k] = cancel
	return func() {
		cancel()
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.byID[id], k)
		if len(b.byID[id]) == 0 {
			delete(b.byID, id)
		}
	}
}

// cancel stops every build running under id.
func (b *buildCancels) cancel(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range b.byID[id] {
		f()
	}
}

// registryConfig decodes X-Registry-Config (base64url JSON of registry
// host → credentials); like dockerd, a header it cannot read means no
// credentials.
func registryConfig(h string) map[string]registry.AuthConfig {
	if h == "" {
		return nil
	}
	b, err := base64.URLEncoding.DecodeString(h)
	if err != nil {
		if b, err = base64.StdEncoding.DecodeString(h); err != nil {
			return nil
		}
	}
	var out map[string]registry.AuthConfig
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}

// decompressStream undoes the compressions dockerd accepts for a build
// context or an archive uploaded into a container (its DecompressStream),
// recognised by their magic numbers; what names the stream in errors.
func decompressStream(r io.Reader, what string) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(6)
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%s: %v", what, err))
		}
		return zr, nil
	case bytes.HasPrefix(head, []byte("BZh")):
		return bzip2.NewReader(br), nil
	case bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}):
		xr, err := xz.NewReader(br)
		if err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%s: %v", what, err))
		}
		return xr, nil
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%s: %v", what, err))
		}
		return zr.IOReadCloser(), nil
	}
	return br, nil
}

// imageHistory is GET /images/{name}/history.
func (s *server) getImageHistory(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	h, ok := s.cfg.Images.(imageHistory)
	if !ok {
		return errdefs.ErrNotImplemented.WithMessage("image history is not implemented")
	}
	items, err := h.History(ctx, vars["name"])
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, items)
}

// pushImage is POST /images/{name}/push.
func (s *server) pushImage(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	p, ok := s.cfg.Images.(imagePusher)
	if !ok {
		return errdefs.ErrNotImplemented.WithMessage("push is not implemented")
	}
	if err := parseForm(r); err != nil {
		return err
	}
	name, tag := vars["name"], r.Form.Get("tag")
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	if t, ok := named.(reference.Tagged); ok && tag == "" {
		tag = t.Tag()
	}
	repo := reference.FamiliarName(named)
	var auth *registry.AuthConfig
	if h := r.Header.Get(registry.AuthHeader); h != "" {
		if auth, err = authconfig.Decode(h); err != nil {
			return err
		}
	}
	w.Header().Set("Content-Type", "application/json")
	out := &jsonProgress{w: w}
	err = p.Push(ctx, repo, strings.TrimSpace(tag), auth, out.message)
	return out.finish(err, false)
}
