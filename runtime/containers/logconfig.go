package containers

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/containerd/errdefs"
	units "github.com/docker/go-units"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/runtime/logs"
)

// Logging drivers. Output is always stored in json-file's format on the
// host (runtime/logs); "local" is the same store with local's defaults,
// since its on-disk format is invisible through the API; "none" stores
// nothing. Other drivers ship output elsewhere and are refused as dockerd
// refuses a driver it does not know.
const (
	logDriverJSONFile = "json-file"
	logDriverLocal    = "local"
	logDriverNone     = "none"
)

// logOpts are the options each driver accepts, as dockerd validates them
// at create. json-file's labels, env, their -regex forms and tag only
// decorate `docker logs --details`, which husk does not serve; they are
// accepted so that configurations written for dockerd still create.
var logOpts = map[string]map[string]bool{
	logDriverJSONFile: {"max-size": true, "max-file": true, "compress": true, "labels": true, "labels-regex": true, "env": true, "env-regex": true, "tag": true},
	logDriverLocal:    {"max-size": true, "max-file": true, "compress": true},
	logDriverNone:     {},
}

func logDriver(lc container.LogConfig) string {
	if lc.Type == "" {
		return logDriverJSONFile
	}
	return lc.Type
}

// validateLogConfig refuses at create what dockerd refuses at create: an
// unknown driver or option. The options' values are checked at start.
func validateLogConfig(lc container.LogConfig) error {
	driver := logDriver(lc)
	allowed, ok := logOpts[driver]
	if !ok {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("error looking up logging plugin %s: plugin %q not found", driver, driver))
	}
	for k := range lc.Config {
		if allowed[k] {
			continue
		}
		switch driver {
		case logDriverJSONFile:
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("unknown log opt '%s' for json-file log driver", k))
		case logDriverNone:
			return errdefs.ErrInvalidArgument.WithMessage("invalid logging opts for driver none")
		default:
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("unknown log opt '%s' for log driver %s", k, driver))
		}
	}
	return nil
}

// logOptions turns a container's log configuration into the store's
// options, with dockerd's defaults and messages (json-file's New and
// local's config); dockerd reports these when the container starts, as
// "failed to initialize logging driver: ...".
func logOptions(lc container.LogConfig) (logs.Options, error) {
	driver := logDriver(lc)
	cfg := lc.Config
	switch driver {
	case logDriverNone:
		return logs.Options{Discard: true}, nil
	case logDriverLocal:
		o := logs.Options{MaxSize: 20 << 20, MaxFiles: 5, Compress: true}
		var err error
		if s, ok := cfg["max-size"]; ok {
			if o.MaxSize, err = units.RAMInBytes(s); err != nil {
				return o, err
			}
			if o.MaxSize <= 0 {
				return o, errors.New("max size should be a positive number")
			}
		}
		if s, ok := cfg["max-file"]; ok {
			if o.MaxFiles, err = strconv.Atoi(s); err != nil {
				return o, err
			}
			if o.MaxFiles < 1 {
				return o, errors.New("max file count cannot be less than 1")
			}
		}
		if s, ok := cfg["compress"]; ok {
			if o.Compress, err = strconv.ParseBool(s); err != nil {
				return o, err
			}
		}
		if o.MaxFiles == 1 {
			o.Compress = false
		}
		return o, nil
	}
	o := logs.Options{MaxFiles: 1}
	var err error
	if s, ok := cfg["max-size"]; ok {
		if o.MaxSize, err = units.FromHumanSize(s); err != nil {
			return o, err
		}
		if o.MaxSize <= 0 {
			return o, errors.New("max-size must be a positive number")
		}
	}
	if s, ok := cfg["max-file"]; ok {
		if o.MaxFiles, err = strconv.Atoi(s); err != nil {
			return o, err
		}
		if o.MaxFiles < 1 {
			return o, errors.New("max-file cannot be less than 1")
		}
	}
	if s, ok := cfg["compress"]; ok {
		if o.Compress, err = strconv.ParseBool(s); err != nil {
			return o, err
		}
		if o.Compress && (o.MaxFiles == 1 || o.MaxSize == 0) {
			return o, errors.New("compress cannot be true when max-file is less than 2 or max-size is not set")
		}
	}
	return o, nil
}

// configureLog applies the container's log options to its store before a
// start. Callers hold c.mu.
func (c *ctr) configureLog() error {
	o, err := logOptions(c.rec.HostConfig.LogConfig)
	if err != nil {
		return fmt.Errorf("failed to initialize logging driver: %w", err)
	}
	c.log.SetOptions(o)
	return nil
}

// readableLog refuses to read back the output of a driver that stores none.
func (c *ctr) readableLog() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if logDriver(c.rec.HostConfig.LogConfig) == logDriverNone {
		return errdefs.ErrNotImplemented.WithMessage("configured logging driver does not support reading")
	}
	return nil
}

// logPath is inspect's LogPath: only json-file names its file.
func (c *ctr) logPath() string {
	if logDriver(c.rec.HostConfig.LogConfig) != logDriverJSONFile {
		return ""
	}
	return c.log.Path()
}
