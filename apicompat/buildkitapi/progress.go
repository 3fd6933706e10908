package buildkitapi

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	controlapi "github.com/moby/buildkit/api/services/control"
	"github.com/moby/moby/api/types/jsonstream"
	digest "github.com/opencontainers/go-digest"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/husk-vm/husk/imagebuild/builder"
)

// progress turns a build into the vertexes a BuildKit client draws: one
// per internal phase and per Dockerfile step, one after the other, with
// what the step printed as its log.
type progress struct {
	j   *job
	ref string

	mu  sync.Mutex
	cur *controlapi.Vertex
}

func newProgress(j *job, ref string) *progress { return &progress{j: j, ref: ref} }

// vertex completes the current vertex and starts one named name.
func (p *progress) vertex(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.completeLocked("")
	p.cur = &controlapi.Vertex{
		Digest:  digest.FromString(fmt.Sprintf("%s %d %s", p.ref, p.j.nextVertex(), name)).String(),
		Name:    name,
		Started: timestamppb.Now(),
	}
	p.j.publish(&controlapi.StatusResponse{Vertexes: []*controlapi.Vertex{p.cur}})
}

// cached marks the current vertex as taken from the cache.
func (p *progress) cached() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		p.cur.Cached = true
	}
}

// log adds text to the current vertex's log.
func (p *progress) log(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || text == "" {
		return
	}
	p.j.publish(&controlapi.StatusResponse{Logs: []*controlapi.VertexLog{{
		Vertex: p.cur.Digest, Timestamp: timestamppb.Now(), Stream: 1, Msg: []byte(text),
	}}})
}

// end completes the current vertex, failed with err if it is not nil.
func (p *progress) end(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := ""
	if err != nil {
		msg = status.Convert(err).Message()
	}
	p.completeLocked(msg)
}

func (p *progress) completeLocked(errMsg string) {
	if p.cur == nil {
		return
	}
	done := &controlapi.Vertex{
		Digest: p.cur.Digest, Name: p.cur.Name, Cached: p.cur.Cached,
		Started: p.cur.Started, Completed: timestamppb.Now(), Error: errMsg,
	}
	p.cur = nil
	p.j.publish(&controlapi.StatusResponse{Vertexes: []*controlapi.Vertex{done}})
}

// output is the builder's Output for this progress.
func (p *progress) output() builder.Output {
	return builder.Output{
		Stream: p.log,
		Step: func(stage string, n, total int, instruction string) {
			p.vertex(stepName(stage, n, total, instruction))
		},
		Cached: p.cached,
		// A FROM's pull reports per layer; the log keeps the lines
		// about the image ("Pulling from", "Digest", "Status").
		Progress: func(m jsonstream.Message) {
			if m.ID == "" && m.Status != "" {
				p.log(strings.TrimSuffix(m.Status, "\n") + "\n")
			}
		},
	}
}

// stepName is a step's vertex name as BuildKit writes it: "[stage n/m]
// INSTRUCTION", the number padded to the total's width.
func stepName(stage string, n, total int, instruction string) string {
	if stage != "" {
		stage += " "
	}
	return fmt.Sprintf("[%s%*d/%d] %s", stage, len(strconv.Itoa(total)), n, total, instruction)
}
