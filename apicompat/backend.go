package apicompat

import (
	"context"
	"io"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/api/types/system"

	"github.com/husk-vm/husk/runtime/containers"
)

// Errors returned by backends carry their class through containerd/errdefs
// (errdefs.ErrNotFound.WithMessage("No such container: x")); the server maps
// the class to dockerd's status code and writes the message unchanged.

// Images is what the API needs of the image store.
type Images interface {
	// Pull fetches ref as the client sent it ("alpine",
	// "localhost:5000/x:1", "x@sha256:...") for platform ("" means
	// linux/amd64). It reports progress through progress, in the shape the
	// docker CLI draws. An error returned before the first progress message
	// becomes an HTTP error; after it, an in-stream error.
	Pull(ctx context.Context, ref, platform string, auth *registry.AuthConfig, progress func(jsonstream.Message)) error
	List(ctx context.Context, opts ImageListOptions) ([]image.Summary, error)
	Inspect(ctx context.Context, ref string) (image.InspectResponse, error)
	Remove(ctx context.Context, ref string, force, prune bool) ([]image.DeleteResponse, error)
	Tag(ctx context.Context, source, repo, tag string) error
	// Save writes a docker-archive tar (manifest.json + OCI layout) of refs.
	Save(ctx context.Context, refs []string, w io.Writer) error
	// Load reads an archive as written by `docker save` and reports
	// "Loaded image: x" lines through progress.
	Load(ctx context.Context, r io.Reader, progress func(jsonstream.Message)) error
}

// ImageListOptions is GET /images/json's query.
type ImageListOptions struct {
	All     bool
	Filters map[string][]string
}

// Containers is what the API needs of the container runtime.
type Containers interface {
	Create(ctx context.Context, req CreateRequest) (container.CreateResponse, error)
	Start(ctx context.Context, ref string) error
	// Stop sends signal (the container's StopSignal when "") and waits
	// timeout (the container's StopTimeout, else 10 s, when nil; -1 waits
	// forever) before killing.
	Stop(ctx context.Context, ref, signal string, timeout *int) error
	Kill(ctx context.Context, ref, signal string) error
	Remove(ctx context.Context, ref string, opts RemoveOptions) error
	// Wait registers the wait before it returns, so a start that follows is
	// seen; the channel yields one response.
	Wait(ctx context.Context, ref string, cond container.WaitCondition) (<-chan container.WaitResponse, error)
	Inspect(ctx context.Context, ref string) (container.InspectResponse, error)
	List(ctx context.Context, opts ContainerListOptions) ([]container.Summary, error)
	// Attach connects streams to the container's main process and returns
	// when output ends (the process exited) or ctx is done. A nil stream is
	// not attached.
	Attach(ctx context.Context, ref string, opts AttachOptions) error
	// Logs returns stored output; with Follow, the channel stays open until
	// the container stops or ctx is done.
	Logs(ctx context.Context, ref string, opts LogsOptions) (<-chan LogEntry, error)
	// Resize changes the main process's terminal size.
	Resize(ctx context.Context, ref string, height, width uint) error
}

// The request types are the runtime's: nothing may import apicompat, so the
// runtime owns them and the API layer names them here.
type (
	CreateRequest        = containers.CreateRequest
	RemoveOptions        = containers.RemoveOptions
	ContainerListOptions = containers.ListOptions
	AttachOptions        = containers.AttachOptions
	LogsOptions          = containers.LogsOptions
	LogEntry             = containers.LogEntry
)

// System answers /info and /version with what only the daemon knows.
type System interface {
	Info(ctx context.Context) (system.Info, error)
	Version(ctx context.Context) (system.VersionResponse, error)
}
