package apicompat

import (
	"context"
	"net/http"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/runtime/containers"
)

// ContainerUpdater serves POST /containers/{name}/update.
type ContainerUpdater interface {
	Update(ctx context.Context, container string, opts UpdateOptions) (container.UpdateResponse, error)
}

type UpdateOptions = containers.UpdateOptions

func (s *server) updateContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if s.cfg.Updater == nil {
		return errdefs.ErrNotImplemented.WithMessage("this daemon cannot update containers")
	}
	if err := parseForm(r); err != nil {
		return err
	}
	var cfg container.UpdateConfig
	if err := readJSON(r, &cfg); err != nil {
		return err
	}
	version := apiVersion(ctx)
	if versionLess(version, "1.40") {
		cfg.PidsLimit = nil
	}
	// dockerd takes the per-device blkio settings from API 1.55 on.
	if versionLess(version, "1.55") {
		cfg.BlkioWeightDevice, cfg.BlkioDeviceReadBps, cfg.BlkioDeviceWriteBps = nil, nil, nil
		cfg.BlkioDeviceReadIOps, cfg.BlkioDeviceWriteIOps = nil, nil
	}
	if cfg.PidsLimit != nil && *cfg.PidsLimit <= 0 {
		// 0 and any negative value both mean unlimited.
		var unlimited int64
		cfg.PidsLimit = &unlimited
	}
	resp, err := s.cfg.Updater.Update(ctx, vars["name"], UpdateOptions{Resources: cfg.Resources, RestartPolicy: cfg.RestartPolicy})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, resp)
}
