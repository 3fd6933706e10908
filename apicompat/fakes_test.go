package apicompat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/api/types/system"
)

// fakeProc is a container whose "process", once started, writes a line
// to each attached output stream, echoes stdin to stdout until stdin ends,
// and exits with exitCode.
type fakeProc struct {
	id, name string
	cfg      *container.Config
	running  bool
	exited   bool
	started  chan struct{}
	exitCode int
	stdin    string
	waiters  []chan container.WaitResponse
}

type fakeContainers struct {
	mu      sync.Mutex
	procs   map[string]*fakeProc
	logs    []LogEntry
	created []CreateRequest
	calls   []string
	lastOpt any
	// silentEnded receives how the attach of a "silent" container (one
	// whose process never writes nor exits) ended.
	silentEnded chan error
	// silentStdinEnded is signalled when a silent container's stdin ends.
	silentStdinEnded chan struct{}
}

func newFakeContainers() *fakeContainers {
	return &fakeContainers{procs: map[string]*fakeProc{}, silentEnded: make(chan error, 1), silentStdinEnded: make(chan struct{}, 1)}
}

func (f *fakeContainers) record(call string, opt any) {
	f.calls = append(f.calls, call)
	f.lastOpt = opt
}

// lookup must be called with mu held.
func (f *fakeContainers) lookup(ref string) (*fakeProc, error) {
	if p, ok := f.procs[strings.TrimPrefix(ref, "/")]; ok {
		return p, nil
	}
	return nil, errdefs.ErrNotFound.WithMessage("No such container: " + ref)
}

func (f *fakeContainers) Create(_ context.Context, req CreateRequest) (container.CreateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.Config.Image == "missing" {
		return container.CreateResponse{}, errdefs.ErrNotFound.WithMessage("No such image: missing:latest")
	}
	id := fmt.Sprintf("%064d", len(f.procs)+1)
	p := &fakeProc{id: id, name: req.Name, cfg: req.Config, started: make(chan struct{}), exitCode: 3}
	f.procs[id] = p
	if req.Name != "" {
		f.procs[strings.TrimPrefix(req.Name, "/")] = p
	}
	f.created = append(f.created, req)
	return container.CreateResponse{ID: id}, nil
}

func (f *fakeContainers) Start(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.lookup(ref)
	if err != nil {
		return err
	}
	if p.running {
		return errdefs.ErrNotModified.WithMessage("container already started")
	}
	if p.exited {
		p.started, p.exited = make(chan struct{}), false
	}
	p.running = true
	close(p.started)
	f.record("start", ref)
	return nil
}

func (f *fakeContainers) Stop(_ context.Context, ref, signal string, timeout *int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.lookup(ref)
	if err != nil {
		return err
	}
	f.record("stop", []any{signal, timeout})
	if !p.running {
		return errdefs.ErrNotModified.WithMessage("container already stopped")
	}
	f.exitLocked(p, 143)
	return nil
}

func (f *fakeContainers) Kill(_ context.Context, ref, signal string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.lookup(ref)
	if err != nil {
		return err
	}
	if !p.running {
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("container %s is not running", p.id))
	}
	f.record("kill", signal)
	f.exitLocked(p, 137)
	return nil
}

// exitLocked ends p's process; mu must be held.
func (f *fakeContainers) exitLocked(p *fakeProc, code int) {
	p.running, p.exited, p.exitCode = false, true, code
	for _, w := range p.waiters {
		w <- container.WaitResponse{StatusCode: int64(code)}
	}
	p.waiters = nil
}

func (f *fakeContainers) Remove(_ context.Context, ref string, opts RemoveOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.lookup(ref)
	if err != nil {
		return err
	}
	if p.running && !opts.Force {
		return errdefs.ErrConflict.WithMessage("cannot remove container: container is running: stop the container before removing or force remove")
	}
	delete(f.procs, p.id)
	delete(f.procs, p.name)
	f.record("remove", opts)
	return nil
}

func (f *fakeContainers) Wait(_ context.Context, ref string, cond container.WaitCondition) (<-chan container.WaitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.lookup(ref)
	if err != nil {
		return nil, err
	}
	f.record("wait", cond)
	ch := make(chan container.WaitResponse, 1)
	if cond == container.WaitConditionNotRunning && !p.running {
		ch <- container.WaitResponse{StatusCode: int64(p.exitCode)}
		return ch, nil
	}
	p.waiters = append(p.waiters, ch)
	return ch, nil
}

func (f *fakeContainers) Inspect(_ context.Context, ref string) (container.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.lookup(ref)
	if err != nil {
		return container.InspectResponse{}, err
	}
	return container.InspectResponse{
		ID:     p.id,
		Name:   "/" + p.name,
		State:  &container.State{Running: p.running, ExitCode: p.exitCode},
		Config: p.cfg,
	}, nil
}

func (f *fakeContainers) List(_ context.Context, opts ContainerListOptions) ([]container.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("list", opts)
	if opts.Filters["status"] != nil && opts.Filters["status"][0] == "none" {
		return nil, nil
	}
	return []container.Summary{{ID: "c1", Names: []string{"/one"}, Image: "alpine"}}, nil
}

func (f *fakeContainers) Attach(ctx context.Context, ref string, opts AttachOptions) error {
	f.mu.Lock()
	p, err := f.lookup(ref)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-p.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	if len(p.cfg.Cmd) > 0 && p.cfg.Cmd[0] == "silent" {
		if opts.Stdin != nil {
			if _, err := io.Copy(io.Discard, opts.Stdin); err == nil {
				f.silentStdinEnded <- struct{}{}
			}
		}
		<-ctx.Done()
		f.silentEnded <- ctx.Err()
		return ctx.Err()
	}
	if opts.Stdout != nil {
		if _, err := io.WriteString(opts.Stdout, "hello stdout\n"); err != nil {
			return err
		}
	}
	if opts.Stderr != nil {
		if _, err := io.WriteString(opts.Stderr, "hello stderr\n"); err != nil {
			return err
		}
	}
	var in []byte
	if opts.Stdin != nil {
		in, err = io.ReadAll(opts.Stdin)
		if err != nil {
			return err
		}
		if opts.Stdout != nil {
			if _, err := fmt.Fprintf(opts.Stdout, "stdin: %s", in); err != nil {
				return err
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p.stdin = string(in)
	f.exitLocked(p, p.exitCode)
	return nil
}

func (f *fakeContainers) Logs(_ context.Context, ref string, opts LogsOptions) (<-chan LogEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.lookup(ref); err != nil {
		return nil, err
	}
	f.record("logs", opts)
	ch := make(chan LogEntry, len(f.logs))
	for _, e := range f.logs {
		ch <- e
	}
	close(ch)
	return ch, nil
}

func (f *fakeContainers) Resize(_ context.Context, ref string, height, width uint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.lookup(ref); err != nil {
		return err
	}
	f.record("resize", [2]uint{height, width})
	return nil
}

type fakeImages struct {
	mu       sync.Mutex
	pulled   []string
	auth     *registry.AuthConfig
	platform string
	listOpts ImageListOptions
	tagged   [][3]string
	removed  []string
	loaded   string
	imported []ImportOptions
}

func (f *fakeImages) ValidateImport(opts ImportOptions) error {
	for _, c := range opts.Changes {
		if strings.HasPrefix(c, "RUN") {
			return errdefs.ErrInvalidArgument.WithMessage("run is not a valid change command")
		}
	}
	return nil
}

// Import takes the tar's content as its message, so that tests see what
// reached it after decompression.
func (f *fakeImages) Import(_ context.Context, tar io.Reader, opts ImportOptions) (string, error) {
	b, err := io.ReadAll(tar)
	if err != nil {
		return "", err
	}
	if string(b) == "bad" {
		return "", errors.New("Error processing tar file: archive/tar: invalid tar header")
	}
	opts.Message = string(b)
	f.mu.Lock()
	f.imported = append(f.imported, opts)
	f.mu.Unlock()
	return "sha256:imported", nil
}

func (f *fakeImages) Pull(_ context.Context, ref, platform string, auth *registry.AuthConfig, progress func(jsonstream.Message)) error {
	f.mu.Lock()
	f.pulled = append(f.pulled, ref)
	f.auth, f.platform = auth, platform
	f.mu.Unlock()
	switch {
	case strings.HasPrefix(ref, "denied"):
		return errdefs.ErrNotFound.WithMessage("pull access denied for denied, repository does not exist or may require 'docker login'")
	case strings.HasPrefix(ref, "broken"):
		progress(jsonstream.Message{Status: "Pulling from library/broken", ID: "latest"})
		return errors.New("unexpected EOF")
	}
	progress(jsonstream.Message{Status: "Pulling from library/alpine", ID: "latest"})
	progress(jsonstream.Message{Status: "Downloading", ID: "abc", Progress: &jsonstream.Progress{Current: 5, Total: 10}})
	progress(jsonstream.Message{Status: "Status: Downloaded newer image for " + ref})
	return nil
}

func (f *fakeImages) List(_ context.Context, opts ImageListOptions) ([]image.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listOpts = opts
	if opts.All {
		return nil, nil
	}
	return []image.Summary{{ID: "sha256:aa", RepoTags: []string{"alpine:latest"}, Size: 1234}}, nil
}

func (f *fakeImages) Inspect(_ context.Context, ref string) (image.InspectResponse, error) {
	if ref != "localhost:5000/a/b:1" {
		return image.InspectResponse{}, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	return image.InspectResponse{ID: "sha256:bb", RepoTags: []string{ref}, Size: 5678}, nil
}

func (f *fakeImages) Remove(_ context.Context, ref string, force, prune bool) ([]image.DeleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, fmt.Sprintf("%s force=%t prune=%t", ref, force, prune))
	return []image.DeleteResponse{{Untagged: ref}, {Deleted: "sha256:bb"}}, nil
}

func (f *fakeImages) Tag(_ context.Context, source, repo, tag string) error {
	if source == "missing" {
		return errdefs.ErrNotFound.WithMessage("No such image: missing:latest")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tagged = append(f.tagged, [3]string{source, repo, tag})
	return nil
}

func (f *fakeImages) Save(_ context.Context, refs []string, w io.Writer) error {
	for _, r := range refs {
		if r == "missing" {
			return errdefs.ErrNotFound.WithMessage("No such image: missing")
		}
	}
	if _, err := io.WriteString(w, "TAR:"+strings.Join(refs, ",")); err != nil {
		return err
	}
	if len(refs) > 1 && refs[1] == "late-missing" {
		return errdefs.ErrNotFound.WithMessage("No such image: late-missing")
	}
	return nil
}

func (f *fakeImages) Load(_ context.Context, r io.Reader, progress func(jsonstream.Message)) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.loaded = string(b)
	f.mu.Unlock()
	if string(b) == "bad" {
		return errdefs.ErrInvalidArgument.WithMessage("invalid archive: no manifest.json")
	}
	progress(jsonstream.Message{Stream: "Loaded image: alpine:latest\n"})
	return nil
}

type fakeSystem struct{}

func (fakeSystem) Info(context.Context) (system.Info, error) {
	return system.Info{ID: "husk-test", Containers: 2, Driver: "husk"}, nil
}

func (fakeSystem) Version(context.Context) (system.VersionResponse, error) {
	return system.VersionResponse{Platform: system.PlatformInfo{Name: "husk"}}, nil
}
