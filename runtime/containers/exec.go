package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"

	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// ExecOptions is POST /containers/{id}/exec's body.
type ExecOptions = container.ExecCreateRequest

// ExecStartOptions are the streams and flags of POST /exec/{id}/start. A
// nil stream is not attached; its output is read and dropped all the same,
// so the process never blocks on it.
type ExecStartOptions struct {
	Detach bool
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// execStore holds the exec instances of every container, in memory only, as
// dockerd does: they do not survive a daemon restart. The zero value is
// ready to use.
type execStore struct {
	mu   sync.Mutex
	byID map[string]*execInstance
}

// execInstance is one exec, from create to the container's removal.
type execInstance struct {
	id   string
	c    *ctr
	opts ExecOptions
	// linkEnv is what the container's links add to the environment.
	linkEnv []string

	mu      sync.Mutex
	started bool
	running bool
	pid     int
	exit    *int
	proc    *host.Process
	// launched is closed once the start attempt is over (proc set or not).
	launched chan struct{}
	// done is closed once the process has ended and its output is drained.
	done chan struct{}
}

func (s *execStore) add(e *execInstance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]*execInstance{}
	}
	s.byID[e.id] = e
}

func (s *execStore) get(id string) (*execInstance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byID[id]; ok {
		return e, nil
	}
	return nil, errdefs.ErrNotFound.WithMessage("No such exec instance: " + id)
}

// remove forgets one exec.
func (s *execStore) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

// dropContainer forgets the execs of a removed container.
func (s *execStore) dropContainer(c *ctr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.byID {
		if e.c == c {
			delete(s.byID, id)
		}
	}
}

// running lists the IDs of c's execs that run now (inspect's ExecIDs).
func (s *execStore) running(c *ctr) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, e := range s.byID {
		e.mu.Lock()
		if e.c == c && e.running {
			ids = append(ids, id)
		}
		e.mu.Unlock()
	}
	return ids
}

// ExecCreate registers a command to run in a running container.
func (m *Manager) ExecCreate(ctx context.Context, ref string, opts ExecOptions) (string, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return "", err
	}
	if len(opts.Cmd) == 0 {
		return "", errdefs.ErrInvalidArgument.WithMessage("No exec command specified")
	}
	if err := c.checkExecutable(ref); err != nil {
		return "", err
	}
	if _, err := ParseDetachKeys(opts.DetachKeys); err != nil {
		// dockerd's exec words it apart from attach, and as an error of
		// its own (a 500).
		return "", errdefs.ErrUnknown.WithMessage("Invalid escape keys (" + opts.DetachKeys + ") provided")
	}
	linkEnv, err := c.linkEnv()
	if err != nil {
		return "", err
	}
	id, err := newID()
	if err != nil {
		return "", err
	}
	m.execs.add(&execInstance{id: id, c: c, opts: opts, linkEnv: linkEnv, launched: make(chan struct{}), done: make(chan struct{})})
	c.emit(execAction(events.ActionExecCreate, opts.Cmd), map[string]string{"execID": id})
	return id, nil
}

// checkExecutable refuses an exec into a container that is not running,
// in dockerd's words (which name a paused container as the client did).
func (c *ctr) checkExecutable(ref string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.run == nil || !c.rec.State.Running:
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is not running", c.rec.ID))
	case c.rec.State.Paused:
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is paused, unpause the container before exec", ref))
	}
	return nil
}

// linkEnv is the environment the container's links give an exec: dockerd
// gives execs the link variables the main process got, resolved at exec
// create.
func (c *ctr) linkEnv() ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, env, err := c.resolveLinks()
	return env, err
}

// ExecStart runs an exec. Attached, it returns when the process has ended
// and its output was delivered, when the client's input ends or it
// detaches, or when ctx ends; detached, once the process runs. A failure
// to start the process after the caller committed to a stream (attached)
// is returned as the error to show in it.
func (m *Manager) ExecStart(ctx context.Context, id string, opts ExecStartOptions) error {
	e, err := m.execs.get(id)
	if err != nil {
		return err
	}
	c := e.c
	e.mu.Lock()
	if e.started {
		state := "has already run"
		if e.running {
			state = "is already running"
		}
		e.mu.Unlock()
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Error: Exec command %s %s", id, state))
	}
	if err := c.checkExecutable(c.rec.ID); err != nil {
		e.mu.Unlock()
		return err
	}
	e.started = true
	e.running = true
	e.mu.Unlock()

	c.mu.Lock()
	r := c.run
	cfg := *c.rec.Config
	hc := *c.rec.HostConfig
	c.mu.Unlock()
	if r == nil {
		e.finish(126)
		close(e.launched)
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is not running", c.rec.ID))
	}
	spec := e.processSpec(&cfg, &hc)
	if spec.Cwd != "" && !path.IsAbs(spec.Cwd) {
		e.finish(126)
		close(e.launched)
		close(e.done)
		// runc checks the process before it starts anything, in these words.
		return errors.New("OCI runtime exec failed: exec failed: Cwd must be an absolute path: unknown")
	}
	// The process must outlive a detached start's request.
	proc, err := r.client.Start(context.WithoutCancel(ctx), e.id, spec)
	if err != nil {
		e.finish(126)
		close(e.launched)
		close(e.done)
		return execStartError(err)
	}
	e.mu.Lock()
	e.proc, e.pid = proc, proc.Pid()
	e.mu.Unlock()
	close(e.launched)
	c.emit(execAction(events.ActionExecStart, e.opts.Cmd), map[string]string{"execID": e.id})

	stdout, stderr := newSwitchWriter(opts.Stdout), newSwitchWriter(opts.Stderr)
	if opts.Detach {
		stdout, stderr = newSwitchWriter(nil), newSwitchWriter(nil)
	}
	go m.monitorExec(e, r, stdout, stderr)
	if opts.Detach {
		return nil
	}
	// Whatever ends this call, later output is no longer the client's.
	defer stdout.drop()
	defer stderr.drop()

	inputEnded := make(chan struct{})
	if opts.Stdin != nil && spec.Stdin {
		in := opts.Stdin
		if spec.Terminal {
			keys, err := ParseDetachKeys(e.opts.DetachKeys)
			if err != nil {
				return err
			}
			in = newEscapeProxy(in, keys)
		}
		w, err := proc.Stdin(ctx)
		if err != nil {
			return fmt.Errorf("attach exec stdin: %w", err)
		}
		// Ending the attachment lets go of the process's input too.
		defer w.Close()
		go func() {
			_, err := io.Copy(w, in)
			// As dockerd: the end of a client's input closes the exec's
			// stdin, except with a terminal, where it (or a detach) ends
			// the attachment instead.
			if !spec.Terminal {
				_ = w.Close()
				return
			}
			if errors.Is(err, errDetached) || err == nil {
				close(inputEnded)
			}
		}()
	}
	select {
	case <-e.done:
		return nil
	case <-inputEnded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// processSpec is the exec's process: the container's environment, user and
// working directory unless the exec overrides them, in the main process's
// PID namespace.
func (e *execInstance) processSpec(cfg *container.Config, hc *container.HostConfig) proto.ProcessSpec {
	env := processEnv(&container.Config{Hostname: cfg.Hostname, Tty: e.opts.Tty, Env: cfg.Env}, e.linkEnv)
	env = mergeEnv(env, e.opts.Env)
	user, cwd := cfg.User, cfg.WorkingDir
	if e.opts.User != "" {
		user = e.opts.User
	}
	if e.opts.WorkingDir != "" {
		cwd = e.opts.WorkingDir
	}
	var size *proto.WindowSize
	if e.opts.ConsoleSize != nil {
		size = consoleSize(e.opts.Tty, *e.opts.ConsoleSize)
	}
	return proto.ProcessSpec{
		Args: e.opts.Cmd, Env: env, Cwd: cwd, User: user, GroupAdd: hc.GroupAdd, NoNewPrivileges: noNewPrivileges(hc),
		Terminal: e.opts.Tty, ConsoleSize: size, Stdin: e.opts.AttachStdin,
		ExecOf:  mainProcess,
		Rlimits: containerRlimits(hc), Capabilities: containerCapabilities(hc, e.opts.Privileged),
	}
}

// monitorExec drains the exec's output to its current writers, records its
// exit code and drops it from the agent.
func (m *Manager) monitorExec(e *execInstance, r *run, stdout, stderr *switchWriter) {
	ctx := context.Background()
	var pumps sync.WaitGroup
	for _, s := range []struct {
		open func(context.Context) (io.ReadCloser, error)
		w    io.Writer
	}{{e.proc.Stdout, stdout}, {e.proc.Stderr, stderr}} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			rc, err := s.open(ctx)
			if err != nil {
				return
			}
			defer rc.Close()
			_, _ = io.Copy(s.w, rc)
		}()
	}
	status, err := e.proc.Wait(ctx)
	pumps.Wait()
	code := status.Code
	if err != nil {
		// The VM went away with the container: the exec was killed.
		code = 137
	}
	e.finish(code)
	close(e.done)
	e.c.emit(events.ActionExecDie, map[string]string{"execID": e.id, "exitCode": strconv.Itoa(code)})
	forgetCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err == nil {
		if ferr := e.proc.Forget(forgetCtx); ferr != nil {
			m.log.Debug("forget exec process", "exec", e.id, "err", ferr)
		}
	}
}

func (e *execInstance) finish(code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running = false
	e.exit = &code
}

// execStartError words a failed exec start as dockerd 20.10 does; the API
// writes it into the stream, and the exec's exit code is 126.
func execStartError(err error) error {
	var ae *host.AgentError
	if !errors.As(err, &ae) {
		return fmt.Errorf("start exec process: %w", err)
	}
	if ae.Kind == proto.KindUser {
		return errors.New(ae.Message)
	}
	return errors.New("OCI runtime exec failed: exec failed: unable to start container process: " + ae.Message + ": unknown")
}

// ExecResize sets the size of an exec's terminal.
func (m *Manager) ExecResize(ctx context.Context, id string, height, width uint) error {
	e, err := m.execs.get(id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	started := e.started
	e.mu.Unlock()
	if !started {
		return errdefs.ErrNotFound.WithMessage("no such exec")
	}
	// The CLI resizes right after the start; wait for the process.
	select {
	case <-e.launched:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.mu.Lock()
	proc, running, tty := e.proc, e.running, e.opts.Tty
	e.mu.Unlock()
	if proc == nil || !running {
		return errdefs.ErrNotFound.WithMessage("no such exec")
	}
	if !tty {
		return nil
	}
	return proc.Resize(ctx, uint16(height), uint16(width))
}

// ExecInspect answers GET /exec/{id}/json.
func (m *Manager) ExecInspect(ctx context.Context, id string) (container.ExecInspectResponse, error) {
	e, err := m.execs.get(id)
	if err != nil {
		return container.ExecInspectResponse{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	privileged := e.opts.Privileged
	resp := container.ExecInspectResponse{
		ID: e.id, Running: e.running, Pid: e.pid, ContainerID: e.c.rec.ID,
		OpenStdin: e.opts.AttachStdin, OpenStdout: e.opts.AttachStdout, OpenStderr: e.opts.AttachStderr,
		ProcessConfig: &container.ExecProcessConfig{
			Tty: e.opts.Tty, Entrypoint: e.opts.Cmd[0], Arguments: append([]string{}, e.opts.Cmd[1:]...),
			Privileged: &privileged, User: e.opts.User,
		},
		DetachKeys: []byte(e.opts.DetachKeys),
	}
	if e.exit != nil {
		code := *e.exit
		resp.ExitCode = &code
	}
	return resp, nil
}

// switchWriter forwards to a client's stream until drop, then discards, so
// that an exec's output keeps flowing after its client went away.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newSwitchWriter(w io.Writer) *switchWriter { return &switchWriter{w: w} }

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		if _, err := s.w.Write(p); err != nil {
			s.w = nil
		}
	}
	return len(p), nil
}

func (s *switchWriter) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = nil
}
