package containers

import (
	"io"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
)

// CreateRequest is POST /containers/create.
type CreateRequest struct {
	Name       string
	Platform   string
	Config     *container.Config
	HostConfig *container.HostConfig
	Networking *network.NetworkingConfig
}

// RemoveOptions is DELETE /containers/{id}'s query.
type RemoveOptions struct {
	Force         bool
	RemoveVolumes bool
	RemoveLinks   bool
}

// ListOptions is GET /containers/json's query.
type ListOptions struct {
	All     bool
	Limit   int
	Size    bool
	Filters map[string][]string
}

// AttachOptions are the streams of one attach. With a TTY, Stdout receives
// everything and Stderr is unused. A nil stream is not attached.
type AttachOptions struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Logs replays stored output first; Stream follows live output.
	Logs       bool
	Stream     bool
	DetachKeys string
}

// LogsOptions is GET /containers/{id}/logs's query.
type LogsOptions struct {
	Stdout, Stderr bool
	Follow         bool
	Since, Until   time.Time
	// Tail is the number of lines from the end; negative means all.
	Tail       int
	Timestamps bool
}

// LogEntry is one chunk of output as stored.
type LogEntry struct {
	Stream string // "stdout" or "stderr"
	Time   time.Time
	Data   []byte
}
