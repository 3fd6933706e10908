package buildkitapi

import (
	"sync"
	"time"

	controlapi "github.com/moby/buildkit/api/services/control"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
)

// jobLinger is how long a finished solve's progress is kept for a Status
// call that comes after it: the client asks for both at once, and either
// may reach the daemon first.
const jobLinger = time.Minute

// A job is one solve's progress, by the client's ref.
type job struct {
	mu       sync.Mutex
	updates  []*controlapi.StatusResponse
	changed  chan struct{} // closed and replaced on every update
	done     bool
	solving  bool
	vertexes int // vertexes numbered so far
	// A gateway build (the client drives it: buildx always does) has
	// its Control.Solve, which says where the session is and what to
	// export, and the client's gateway Solve, which asks for the build;
	// either may come first. ready is closed when the former is known.
	ready     chan struct{}
	readyOnce sync.Once
	session   string
	plan      exportPlan
	refused   error  // why the Control.Solve refused the build
	image     string // what the gateway Solve built
	// returned is closed when a gateway build's client returns; ret is
	// its error, if it sent one.
	returned chan struct{}
	ret      *rpcstatus.Status
	once     sync.Once
}

type jobs struct {
	mu   sync.Mutex
	byID map[string]*job
}

func newJobs() *jobs { return &jobs{byID: map[string]*job{}} }

// get returns ref's job, made on first use.
func (js *jobs) get(ref string) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	j, ok := js.byID[ref]
	if !ok {
		j = &job{changed: make(chan struct{}), ready: make(chan struct{}), returned: make(chan struct{})}
		js.byID[ref] = j
	}
	return j
}

// start marks ref's job as solving and returns it.
func (js *jobs) start(ref string) *job {
	j := js.get(ref)
	j.mu.Lock()
	j.solving = true
	j.mu.Unlock()
	return j
}

// finish ends ref's job: its Status streams end, and it is forgotten
// after jobLinger.
func (js *jobs) finish(ref string, j *job) {
	j.mu.Lock()
	j.done = true
	close(j.changed)
	j.changed = make(chan struct{})
	j.mu.Unlock()
	time.AfterFunc(jobLinger, func() { js.forget(ref, j) })
}

// abandon forgets ref's job if no solve ever started it: a Status call
// whose solve never came.
func (js *jobs) abandon(ref string, j *job) {
	j.mu.Lock()
	idle := !j.solving
	j.mu.Unlock()
	if idle {
		js.forget(ref, j)
	}
}

func (js *jobs) forget(ref string, j *job) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.byID[ref] == j {
		delete(js.byID, ref)
	}
}

func (j *job) publish(u *controlapi.StatusResponse) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.updates = append(j.updates, u)
	close(j.changed)
	j.changed = make(chan struct{})
}

// nextVertex numbers a new vertex of the job.
func (j *job) nextVertex() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.vertexes++
	return j.vertexes
}

// since returns the updates from index i on, whether the job is done,
// and a channel closed at the next change.
func (j *job) since(i int) ([]*controlapi.StatusResponse, bool, <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.updates[i:], j.done, j.changed
}

// setReady records the gateway build's session and exports, or why the
// build cannot be done: its gateway Solve then fails so.
func (j *job) setReady(session string, plan exportPlan, refused error) {
	j.readyOnce.Do(func() {
		j.mu.Lock()
		j.session, j.plan, j.refused = session, plan, refused
		j.mu.Unlock()
		close(j.ready)
	})
}

func (j *job) target() (session string, plan exportPlan, refused error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.session, j.plan, j.refused
}

func (j *job) setImage(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.image = id
}

func (j *job) builtImage() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.image
}

// returnResult records a gateway build's return; only the first counts.
func (j *job) returnResult(err *rpcstatus.Status) {
	j.once.Do(func() {
		j.ret = err
		close(j.returned)
	})
}
