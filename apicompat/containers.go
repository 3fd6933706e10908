package apicompat

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/husk-vm/husk/runtime/containers"
)

// validContainerName is dockerd's container name rule.
var validContainerName = regexp.MustCompile(`^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// rfc3339NanoFixed is RFC 3339 with always nine fractional digits, the
// timestamp prefix of dockerd's logs.
const rfc3339NanoFixed = "2006-01-02T15:04:05.000000000Z07:00"

func (s *server) createContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	if err := checkForJSON(r); err != nil {
		return err
	}
	var req container.CreateRequest
	if err := decodeJSONBody(r.Body, &req); err != nil {
		return err
	}
	if req.Config == nil {
		return errdefs.ErrInvalidArgument.WithMessage("config cannot be empty in order to create a container")
	}
	name := r.Form.Get("name")
	if name != "" && !validContainerName.MatchString(name) {
		// dockerd resolves the image before it reserves the name, so a
		// missing or malformed image is what it reports.
		if _, err := s.cfg.Images.Inspect(ctx, req.Config.Image); errdefs.IsNotFound(err) || errdefs.IsInvalidArgument(err) {
			return err
		}
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Invalid container name (%s), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed", name))
	}
	if req.HostConfig == nil {
		req.HostConfig = &container.HostConfig{}
	}
	if req.NetworkingConfig == nil {
		req.NetworkingConfig = &network.NetworkingConfig{}
	}
	if req.NetworkingConfig.EndpointsConfig == nil {
		req.NetworkingConfig.EndpointsConfig = map[string]*network.EndpointSettings{}
	}
	// dockerd turns the OS-independent "default" network into the Linux
	// default ("bridge") before anything else looks at it.
	if hc := req.HostConfig; hc.NetworkMode == "" || hc.NetworkMode.IsDefault() {
		hc.NetworkMode = network.NetworkBridge
		eps := req.NetworkingConfig.EndpointsConfig
		if ep, ok := eps[network.NetworkDefault]; ok {
			eps[network.NetworkBridge] = ep
			delete(eps, network.NetworkDefault)
		}
	}
	resp, err := s.cfg.Containers.Create(ctx, CreateRequest{
		Name:       name,
		Platform:   r.Form.Get("platform"),
		Config:     req.Config,
		HostConfig: req.HostConfig,
		Networking: req.NetworkingConfig,
	})
	if err != nil {
		return err
	}
	if resp.Warnings == nil {
		resp.Warnings = []string{}
	}
	return writeJSON(w, http.StatusCreated, resp)
}

func (s *server) startContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	// A HostConfig in the start body was removed in API 1.24; dockerd
	// rejects any body longer than an empty JSON object ("{}" with some
	// room), and a chunked one.
	if r.ContentLength > 7 || r.ContentLength == -1 {
		return errdefs.ErrInvalidArgument.WithMessage("starting container with non-empty request body was deprecated since API v1.22 and removed in v1.24")
	}
	if err := parseForm(r); err != nil {
		return err
	}
	if r.Form.Get("checkpoint") != "" {
		return s.startFromCheckpoint(ctx, w, r, vars)
	}
	if err := s.cfg.Containers.Start(ctx, vars["name"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// stopOptions reads stop's and restart's signal (API 1.42+) and t.
func stopOptions(ctx context.Context, r *http.Request) (signal string, timeout *int, err error) {
	if err := parseForm(r); err != nil {
		return "", nil, err
	}
	if !versionLess(apiVersion(ctx), "1.42") {
		signal = r.Form.Get("signal")
	}
	if t := r.Form.Get("t"); t != "" {
		secs, err := strconv.Atoi(t)
		if err != nil {
			return "", nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
		timeout = &secs
	}
	return signal, timeout, nil
}

func (s *server) stopContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	signal, timeout, err := stopOptions(ctx, r)
	if err != nil {
		return err
	}
	if err := s.cfg.Containers.Stop(ctx, vars["name"], signal, timeout); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// restartContainer is stop then start; the backend has no restart of its
// own. A container that is not running is simply started, as dockerd does.
func (s *server) restartContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	signal, timeout, err := stopOptions(ctx, r)
	if err != nil {
		return err
	}
	name := vars["name"]
	if rs, ok := s.cfg.Containers.(restarter); ok {
		// The backend words its own errors: an unknown container is
		// plain "No such container", the rest "Cannot restart container".
		if err := rs.Restart(ctx, name, signal, timeout); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err := s.cfg.Containers.Stop(ctx, name, signal, timeout); err != nil && !errdefs.IsNotModified(err) {
		return fmt.Errorf("Cannot restart container %s: %w", name, err)
	}
	if err := s.cfg.Containers.Start(ctx, name); err != nil {
		return fmt.Errorf("Cannot restart container %s: %w", name, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) killContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	name := vars["name"]
	// dockerd's router reads the signal before it looks the container up,
	// and says so without the kill prefix.
	if _, err := containers.ParseSignal(r.Form.Get("signal"), 0); err != nil {
		return err
	}
	if err := s.cfg.Containers.Kill(ctx, name, r.Form.Get("signal")); err != nil {
		return fmt.Errorf("Cannot kill container: %s: %w", name, err) // dockerd 20.10's wording
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) waitContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	// Before API 1.30 there was no condition and the headers came with the
	// result.
	legacy := versionLess(apiVersion(ctx), "1.30")
	cond := container.WaitConditionNotRunning
	if !legacy {
		if err := parseForm(r); err != nil {
			return err
		}
		// dockerd 20.10 reads an unknown condition as not-running.
		switch v := container.WaitCondition(r.Form.Get("condition")); v {
		case container.WaitConditionNextExit, container.WaitConditionRemoved:
			cond = v
		}
	}
	ch, err := s.cfg.Containers.Wait(ctx, vars["name"], cond)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	if !legacy {
		w.WriteHeader(http.StatusOK)
		flush(w)
	}
	var resp container.WaitResponse
	select {
	case <-ctx.Done():
		return ctx.Err()
	case got, ok := <-ch:
		if ok {
			resp = got
		} else {
			resp = container.WaitResponse{StatusCode: -1, Error: &container.WaitExitError{Message: "wait ended without a result"}}
		}
	}
	return encodeJSON(w, resp)
}

func (s *server) inspectContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	resp, err := s.cfg.Containers.Inspect(ctx, vars["name"])
	if err != nil {
		return err
	}
	if err := s.inspectSize(ctx, r, &resp); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, inspectBody(ctx, resp))
}

func (s *server) listContainers(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	filters, err := parseFilters(r)
	if err != nil {
		return err
	}
	var limit int
	if v := r.Form.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil {
			return errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
	}
	list, err := s.cfg.Containers.List(ctx, ContainerListOptions{
		All:     boolValue(r, "all"),
		Limit:   limit,
		Size:    boolValue(r, "size"),
		Filters: filters,
	})
	if err != nil {
		return err
	}
	if list == nil {
		list = []container.Summary{}
	}
	return writeJSON(w, http.StatusOK, list)
}

func (s *server) removeContainer(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	err := s.cfg.Containers.Remove(ctx, vars["name"], RemoveOptions{
		Force:         boolValue(r, "force"),
		RemoveVolumes: boolValue(r, "v"),
		RemoveLinks:   boolValue(r, "link"),
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) resizeContainer(ctx context.Context, _ http.ResponseWriter, r *http.Request, vars map[string]string) error {
	h, wd, err := resizeQuery(r)
	if err != nil {
		return err
	}
	// Like dockerd, success is a 200 with an empty body.
	return s.cfg.Containers.Resize(ctx, vars["name"], h, wd)
}

// resizeQuery reads the h and w of a container or exec resize.
func resizeQuery(r *http.Request) (h, w uint, err error) {
	if err := parseForm(r); err != nil {
		return 0, 0, err
	}
	h32, err := uint32Value(r, "h")
	if err != nil {
		return 0, 0, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid resize height %q: %v", r.Form.Get("h"), err))
	}
	w32, err := uint32Value(r, "w")
	if err != nil {
		return 0, 0, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid resize width %q: %v", r.Form.Get("w"), err))
	}
	return uint(h32), uint(w32), nil
}

func (s *server) containerLogs(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	if err := parseForm(r); err != nil {
		return err
	}
	// Everything is validated before the 200 goes out: after it, errors
	// can only be reported inside the stream.
	opts := LogsOptions{
		Stdout:     boolValue(r, "stdout"),
		Stderr:     boolValue(r, "stderr"),
		Follow:     boolValue(r, "follow"),
		Timestamps: boolValue(r, "timestamps"),
		Tail:       -1,
	}
	details := boolValue(r, "details")
	if !opts.Stdout && !opts.Stderr {
		return errdefs.ErrInvalidArgument.WithMessage("You must choose at least one stream")
	}
	var err error
	if opts.Since, err = parseUnixTimestamp(r.Form.Get("since")); err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(`invalid value for "since": ` + err.Error())
	}
	if v := r.Form.Get("until"); v != "" && v != "0" {
		if opts.Until, err = parseUnixTimestamp(v); err != nil {
			return errdefs.ErrInvalidArgument.WithMessage(`invalid value for "until": ` + err.Error())
		}
	}
	// dockerd reads anything that is not a number ("all" among others)
	// as the whole log.
	if n, err := strconv.Atoi(r.Form.Get("tail")); err == nil {
		opts.Tail = n
	}
	name := vars["name"]
	ctr, err := s.cfg.Containers.Inspect(ctx, name)
	if err != nil {
		return err
	}
	tty := ctr.Config != nil && ctr.Config.Tty
	var prefix []byte
	if details {
		prefix = append(logAttrs(ctr), ' ')
	}
	entries, err := s.cfg.Containers.Logs(ctx, name, opts)
	if err != nil {
		return err
	}

	contentType := types.MediaTypeRawStream
	if !tty && !versionLess(apiVersion(ctx), "1.42") {
		contentType = types.MediaTypeMultiplexedStream
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	flush(w)

	var mu sync.Mutex
	out, errOut := io.Writer(w), io.Writer(w)
	if !tty {
		out = muxWriter{mu: &mu, w: w, stream: stdcopy.Stdout}
		errOut = muxWriter{mu: &mu, w: w, stream: stdcopy.Stderr}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-entries:
			if !ok {
				return nil
			}
			dst := out
			switch {
			case e.Stream == "stdout" && opts.Stdout:
			case e.Stream == "stderr" && opts.Stderr:
				dst = errOut
			default:
				continue
			}
			if err := writeLogEntry(dst, e, opts.Timestamps, prefix); err != nil {
				// The client went away.
				return nil
			}
			flush(w)
		}
	}
}

// writeLogEntry writes one stored chunk. With timestamps, or details
// (their attributes, then a space), every line gets the prefix, as in
// dockerd, whose log drivers store one line a message.
func writeLogEntry(w io.Writer, e LogEntry, timestamps bool, details []byte) error {
	if !timestamps && details == nil {
		_, err := w.Write(e.Data)
		return err
	}
	var prefix []byte
	if timestamps {
		prefix = []byte(e.Time.UTC().Format(rfc3339NanoFixed) + " ")
	}
	prefix = append(prefix, details...)
	data := e.Data
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line = data[:i+1]
		}
		data = data[len(line):]
		if _, err := w.Write(append(prefix[:len(prefix):len(prefix)], line...)); err != nil {
			return err
		}
	}
	return nil
}

// logAttrs are the attributes docker logs --details shows before each
// line, as dockerd's json-file driver records them: the labels and
// environment variables its log options name (labels, labels-regex, env,
// env-regex), sorted, query-escaped, joined by commas.
func logAttrs(ctr container.InspectResponse) []byte {
	if ctr.HostConfig == nil || ctr.Config == nil {
		return nil
	}
	opts := ctr.HostConfig.LogConfig.Config
	attrs := map[string]string{}
	for _, k := range strings.Split(opts["labels"], ",") {
		if v, ok := ctr.Config.Labels[k]; ok && k != "" {
			attrs[k] = v
		}
	}
	env := map[string]string{}
	for _, kv := range ctr.Config.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for _, k := range strings.Split(opts["env"], ",") {
		if v, ok := env[k]; ok && k != "" {
			attrs[k] = v
		}
	}
	for _, m := range []struct {
		pattern string
		from    map[string]string
	}{{opts["labels-regex"], ctr.Config.Labels}, {opts["env-regex"], env}} {
		if m.pattern == "" {
			continue
		}
		re, err := regexp.Compile(m.pattern)
		if err != nil {
			continue // dockerd refuses it when the container is created
		}
		for k, v := range m.from {
			if re.MatchString(k) {
				attrs[k] = v
			}
		}
	}
	keys := slices.Sorted(maps.Keys(attrs))
	var b []byte
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, url.QueryEscape(k)+"="+url.QueryEscape(attrs[k])...)
	}
	return b
}
