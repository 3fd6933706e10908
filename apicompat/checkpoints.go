package apicompat

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/checkpoint"

	"github.com/husk-vm/husk/runtime/containers"
)

// Checkpoints is what the API needs for `docker checkpoint` and
// `docker start --checkpoint`. dockerd serves these routes only in
// experimental mode; huskd always does (its /_ping says
// Docker-Experimental: true, which is what makes the CLI show them).
type Checkpoints interface {
	CheckpointCreate(ctx context.Context, ref string, req checkpoint.CreateRequest) error
	// CheckpointList lists ref's checkpoints, or those in dir when set.
	CheckpointList(ctx context.Context, ref, dir string) ([]checkpoint.Summary, error)
	CheckpointDelete(ctx context.Context, ref, name, dir string) error
	// StartCheckpoint starts ref from checkpoint name (of ref, or in dir).
	StartCheckpoint(ctx context.Context, ref, name, dir string) error
}

// Forker makes several containers from one checkpoint at once; husk's
// own endpoint, used by `husk fork`.
type Forker interface {
	// Fork creates n containers like ref and restores checkpoint name (of
	// ref, or in dir) into them concurrently; all or none.
	Fork(ctx context.Context, ref, name, dir string, n int) ([]ForkedContainer, error)
}

// ForkedContainer is one container Fork made ({"Id","Name"}).
type ForkedContainer = containers.ForkResult

// maxCheckpointBody bounds POST /containers/{name}/checkpoints's small body.
const maxCheckpointBody = 1 << 16

func (s *server) checkpoints() (Checkpoints, error) {
	if s.cfg.Checkpoints == nil {
		return nil, errdefs.ErrNotImplemented.WithMessage("checkpoints are not supported by this daemon")
	}
	return s.cfg.Checkpoints, nil
}

func (s *server) createCheckpoint(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	cp, err := s.checkpoints()
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	if err := checkForJSON(r); err != nil {
		return err
	}
	var req checkpoint.CreateRequest
	// An empty body is accepted, as dockerd's httputils.ReadJSON does.
	if r.Body != nil && r.ContentLength != 0 {
		if err := decodeJSONBody(http.MaxBytesReader(w, r.Body, maxCheckpointBody), &req); err != nil {
			return err
		}
	}
	if err := cp.CheckpointCreate(ctx, vars["name"], req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

func (s *server) listCheckpoints(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	cp, err := s.checkpoints()
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	list, err := cp.CheckpointList(ctx, vars["name"], r.Form.Get("dir"))
	if err != nil {
		return err
	}
	if list == nil {
		list = []checkpoint.Summary{}
	}
	return writeJSON(w, http.StatusOK, list)
}

func (s *server) deleteCheckpoint(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	cp, err := s.checkpoints()
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	if err := cp.CheckpointDelete(ctx, vars["name"], vars["checkpoint"], r.Form.Get("dir")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// startFromCheckpoint serves POST /containers/{name}/start?checkpoint=X
// [&checkpoint-dir=D]. Unlike dockerd, which refuses a checkpoint-dir on
// start (403 "custom checkpointdir is not supported"), husk restores from
// any directory: that is how a checkpoint moves between containers.
func (s *server) startFromCheckpoint(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	cp, err := s.checkpoints()
	if err != nil {
		return err
	}
	if err := cp.StartCheckpoint(ctx, vars["name"], r.Form.Get("checkpoint"), r.Form.Get("checkpoint-dir")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// forkContainer serves husk's POST /husk/containers/{name}/fork
// ?checkpoint=X[&checkpoint-dir=D]&count=N, answering 201 with the new
// containers as [{"Id","Name"}].
func (s *server) forkContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if s.cfg.Forker == nil {
		return errdefs.ErrNotImplemented.WithMessage("fork is not supported by this daemon")
	}
	if err := parseForm(r); err != nil {
		return err
	}
	name := r.Form.Get("checkpoint")
	if name == "" {
		return errdefs.ErrInvalidArgument.WithMessage("checkpoint is required")
	}
	n := 1
	if v := r.Form.Get("count"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid count %q", v))
		}
	}
	forks, err := s.cfg.Forker.Fork(ctx, vars["name"], name, r.Form.Get("checkpoint-dir"), n)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, forks)
}
