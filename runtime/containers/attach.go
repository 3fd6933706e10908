package containers

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/moby/moby/api/types/events"

	"github.com/husk-vm/husk/runtime/logs"
)

// hub fans a container's live output out to attached clients and feeds their
// stdin to the process. Subscribers belong to the current run, or to the
// next one when none is running (docker run attaches before it starts).
type hub struct {
	mu    sync.Mutex
	subs  map[*subscriber]struct{}
	stdin io.WriteCloser
	// running is closed when a run starts; replaced when it ends.
	running chan struct{}
}

type subscriber struct {
	stdout, stderr io.Writer
	done           chan struct{}
	once           sync.Once
}

func (s *subscriber) close() { s.once.Do(func() { close(s.done) }) }

func newHub() *hub {
	return &hub{subs: map[*subscriber]struct{}{}, running: make(chan struct{})}
}

func (h *hub) subscribe(stdout, stderr io.Writer) *subscriber {
	s := &subscriber{stdout: stdout, stderr: stderr, done: make(chan struct{})}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.close()
}

// started marks a run as begun, with the process's stdin if it has one.
func (h *hub) started(stdin io.WriteCloser) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stdin = stdin
	close(h.running)
}

// ended completes every subscriber of the run that just ended.
func (h *hub) ended() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.close()
		delete(h.subs, s)
	}
	h.stdin = nil
	h.running = make(chan struct{})
}

// writer returns the fan-out writer for one stream.
func (h *hub) writer(stream string) io.Writer { return hubWriter{h: h, stream: stream} }

type hubWriter struct {
	h      *hub
	stream string
}

func (w hubWriter) Write(p []byte) (int, error) {
	w.h.mu.Lock()
	subs := make([]*subscriber, 0, len(w.h.subs))
	for s := range w.h.subs {
		subs = append(subs, s)
	}
	w.h.mu.Unlock()
	for _, s := range subs {
		dst := s.stdout
		if w.stream == "stderr" {
			dst = s.stderr
		}
		if dst == nil {
			continue
		}
		if _, err := dst.Write(p); err != nil {
			// That client went away; the others and the log carry on.
			w.h.unsubscribe(s)
		}
	}
	return len(p), nil
}

// Attach connects a client to the main process.
func (m *Manager) Attach(ctx context.Context, ref string, opts AttachOptions) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	if opts.Logs {
		entries, err := c.log.Read(ctx, logs.ReadOptions{Stdout: opts.Stdout != nil, Stderr: opts.Stderr != nil, Tail: -1})
		if err != nil {
			return err
		}
		for e := range entries {
			dst := opts.Stdout
			if e.Stream == "stderr" {
				dst = opts.Stderr
			}
			if _, err := dst.Write(e.Data); err != nil {
				return err
			}
		}
	}
	if !opts.Stream {
		return nil
	}
	c.emit(events.ActionAttach, nil)
	c.mu.Lock()
	stdinOnce := c.rec.Config.StdinOnce
	tty := c.rec.Config.Tty
	c.mu.Unlock()
	stdout, stderr := opts.Stdout, opts.Stderr
	if tty && stderr == nil {
		stderr = stdout
	}
	var in io.Reader
	if opts.Stdin != nil {
		in = opts.Stdin
		// Detach keys apply to terminals only, as in dockerd.
		if tty {
			keys, err := ParseDetachKeys(opts.DetachKeys)
			if err != nil {
				return err
			}
			in = newEscapeProxy(in, keys)
		}
	}
	sub := c.hub.subscribe(stdout, stderr)
	defer c.hub.unsubscribe(sub)
	inputEnded := make(chan struct{})
	if in != nil {
		go func() {
			// dockerd closes the process's stdin at the end of the
			// client's only for a StdinOnce container without a TTY;
			// otherwise that end (or a detach) ends this attachment.
			closeStdin := stdinOnce && !tty
			if c.hub.feedStdin(ctx, in, closeStdin, sub.done) && !closeStdin {
				close(inputEnded)
			}
		}()
	}
	select {
	case <-sub.done:
		return nil
	case <-inputEnded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// feedStdin copies a client's input to the process once it runs. It
// reports whether the input was consumed (its end or a detach): false when
// the process has no stdin or the attachment ended first.
func (h *hub) feedStdin(ctx context.Context, in io.Reader, closeAfter bool, done <-chan struct{}) bool {
	h.mu.Lock()
	running := h.running
	h.mu.Unlock()
	select {
	case <-running:
	case <-done:
		return false
	case <-ctx.Done():
		return false
	}
	h.mu.Lock()
	stdin := h.stdin
	h.mu.Unlock()
	if stdin == nil {
		return false
	}
	_, err := io.Copy(stdin, in)
	if closeAfter && !errors.Is(err, errDetached) {
		_ = stdin.Close()
	}
	return true
}

// Logs returns stored output, then live output when following.
func (m *Manager) Logs(ctx context.Context, ref string, opts LogsOptions) (<-chan LogEntry, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return nil, err
	}
	if err := c.readableLog(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	running := c.run != nil
	c.mu.Unlock()
	entries, err := c.log.Read(ctx, logs.ReadOptions{
		Stdout: opts.Stdout, Stderr: opts.Stderr, Since: opts.Since, Until: opts.Until,
		Tail: opts.Tail, Follow: opts.Follow, Running: running,
	})
	if err != nil {
		return nil, err
	}
	out := make(chan LogEntry)
	go func() {
		defer close(out)
		for e := range entries {
			select {
			case out <- LogEntry{Stream: e.Stream, Time: e.Time, Data: e.Data}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Resize changes the main process's terminal size.
func (m *Manager) Resize(ctx context.Context, ref string, height, width uint) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	c.mu.Lock()
	r := c.run
	tty := c.rec.Config.Tty
	c.mu.Unlock()
	if r == nil || !tty {
		return nil
	}
	c.emit(events.ActionResize, map[string]string{"height": strconv.FormatUint(uint64(height), 10), "width": strconv.FormatUint(uint64(width), 10)})
	return r.proc.Resize(ctx, uint16(height), uint16(width))
}
