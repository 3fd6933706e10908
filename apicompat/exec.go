package apicompat

import (
	"context"
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/runtime/containers"
)

// Execs runs extra processes in running containers (docker exec).
type Execs interface {
	ExecCreate(ctx context.Context, container string, opts ExecOptions) (string, error)
	// ExecStart runs the exec; attached, it returns once the output ended,
	// the client's input ended or ctx is done.
	ExecStart(ctx context.Context, id string, opts ExecStartOptions) error
	ExecResize(ctx context.Context, id string, height, width uint) error
	ExecInspect(ctx context.Context, id string) (container.ExecInspectResponse, error)
}

type (
	ExecOptions      = containers.ExecOptions
	ExecStartOptions = containers.ExecStartOptions
)

func (s *server) createExec(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	var req container.ExecCreateRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	// dockerd checks this before it looks for the container.
	if len(req.Cmd) == 0 {
		return errdefs.ErrInvalidArgument.WithMessage("No exec command specified")
	}
	id, err := s.cfg.Execs.ExecCreate(ctx, vars["name"], req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, container.ExecCreateResponse{ID: id})
}

// startExec is POST /exec/{name}/start. Attached, the connection is
// hijacked first, as dockerd does, so a process that cannot start is
// reported inside the stream (and the CLI reads exit code 126 from the
// exec's inspect); detached, errors are ordinary HTTP errors.
func (s *server) startExec(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	var req container.ExecStartRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	id := vars["name"]
	ex, err := s.cfg.Execs.ExecInspect(ctx, id)
	if err != nil {
		return err
	}
	if req.Detach {
		if err := s.cfg.Execs.ExecStart(ctx, id, ExecStartOptions{Detach: true}); err != nil {
			return err
		}
		w.WriteHeader(http.StatusOK)
		return nil
	}
	h, err := s.hijack(ctx, w, r, req.Tty, ex.OpenStdin)
	if err != nil {
		return fmt.Errorf("exec %s: hijack connection: %w", id, err)
	}
	if h == nil {
		return nil
	}
	defer h.finish()
	opts := ExecStartOptions{}
	if ex.OpenStdout {
		opts.Stdout = h.stdout
	}
	if ex.OpenStderr {
		opts.Stderr = h.stderr
	}
	if h.stdin != nil {
		opts.Stdin = h.stdin
	}
	if err := s.cfg.Execs.ExecStart(h.ctx, id, opts); err != nil && h.ctx.Err() == nil {
		s.log.Info("exec start failed", "exec", id, "error", err)
		_, _ = fmt.Fprint(h.stdout, err.Error()+"\r\n")
	}
	return nil
}

func (s *server) resizeExec(ctx context.Context, _ http.ResponseWriter, r *http.Request, vars map[string]string) error {
	h, wd, err := resizeQuery(r)
	if err != nil {
		return err
	}
	return s.cfg.Execs.ExecResize(ctx, vars["name"], h, wd)
}

func (s *server) inspectExec(ctx context.Context, w http.ResponseWriter, _ *http.Request, vars map[string]string) error {
	resp, err := s.cfg.Execs.ExecInspect(ctx, vars["name"])
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, resp)
}
