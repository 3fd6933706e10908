package apicompat

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/runtime/containers"
)

// Archives copies files into and out of containers (docker cp).
type Archives interface {
	ArchiveStat(ctx context.Context, container, path string) (container.PathStat, error)
	ArchiveGet(ctx context.Context, container, path string) (container.PathStat, io.ReadCloser, error)
	ArchivePut(ctx context.Context, container, path string, opts ArchivePutOptions, r io.Reader) error
}

type ArchivePutOptions = containers.ArchivePutOptions

// pathStatHeader carries a path's stat on archive answers.
const pathStatHeader = "X-Docker-Container-Path-Stat"

// archivePath reads the path query parameter; dockerd's message has no
// space before "cannot".
func archivePath(r *http.Request) (string, error) {
	if err := parseForm(r); err != nil {
		return "", err
	}
	p := r.Form.Get("path")
	if p == "" {
		return "", errdefs.ErrInvalidArgument.WithMessage("bad parameter: pathcannot be empty")
	}
	return p, nil
}

func setPathStat(w http.ResponseWriter, st container.PathStat) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode path stat: %w", err)
	}
	w.Header().Set(pathStatHeader, base64.StdEncoding.EncodeToString(b))
	return nil
}

func (s *server) headArchive(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	p, err := archivePath(r)
	if err != nil {
		return err
	}
	st, err := s.cfg.Archives.ArchiveStat(ctx, vars["name"], p)
	if err != nil {
		return err
	}
	if err := setPathStat(w, st); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *server) getArchive(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	p, err := archivePath(r)
	if err != nil {
		return err
	}
	st, rc, err := s.cfg.Archives.ArchiveGet(ctx, vars["name"], p)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := setPathStat(w, st); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		// The answer is under way: all that can be done is to stop.
		s.log.Info("archive download ended early", "container", vars["name"], "path", p, "error", err)
	}
	return nil
}

func (s *server) putArchive(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	p, err := archivePath(r)
	if err != nil {
		return err
	}
	opts := ArchivePutOptions{
		NoOverwriteDirNonDir: boolValue(r, "noOverwriteDirNonDir"),
		CopyUIDGID:           boolValue(r, "copyUIDGID"),
	}
	// Clients may compress the tar (testcontainers-go sends it gzipped);
	// dockerd takes gzip, bzip2, xz and zstd alike.
	body, err := decompressStream(r.Body, "read archive")
	if err != nil {
		return err
	}
	if err := s.cfg.Archives.ArchivePut(ctx, vars["name"], p, opts, body); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}
