package apicompat

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs/pkg/errhttp"
	"github.com/moby/moby/api/types/common"
)

// Config is what the API server serves and how it presents itself.
type Config struct {
	Images     Images
	Containers Containers
	System     System
	// Networks may be nil: /networks then answers 501.
	Networks Networks
	// Checkpoints and Forker may be nil: their routes then answer 501.
	Checkpoints Checkpoints
	Forker      Forker
	// Builder serves POST /build; nil answers 501.
	Builder Builder
	// BuildKit serves POST /grpc and POST /session, where buildx's
	// docker driver finds a daemon's BuildKit; nil leaves them out, and
	// buildx then runs BuildKit in a container of its own.
	BuildKit BuildKit
	// Volumes may be nil: /volumes then answers 501.
	Volumes Volumes
	Logger  *slog.Logger

	// Feature backends beyond the core lifecycle.
	Execs    Execs
	Archives Archives
	Admin    ContainerAdmin
	// Events serves GET /events; nil answers 501.
	Events Events
	// Stats serves GET /containers/{name}/stats; nil answers 501.
	Stats ContainerStats
	// Files serves diff, export and commit; nil answers 501.
	Files ContainerFiles
	// Updater serves POST /containers/{name}/update; nil answers 501.
	Updater ContainerUpdater

	// MinAPIVersion and APIVersion bound the versions clients may ask for
	// in a "/v1.NN/" prefix; they default to "1.24" and "1.50" (the API of
	// the docker CLI this project targets).
	MinAPIVersion string
	APIVersion    string
	// Version is the daemon's version, shown in the Server header and in
	// GET /version when the System backend leaves it empty. Defaults to
	// "dev".
	Version string
}

const (
	defaultMinAPIVersion = "1.24"
	defaultAPIVersion    = "1.50"
	defaultVersion       = "dev"
)

// apiFunc is one endpoint. An error it returns before writing anything is
// turned into dockerd's JSON error response.
type apiFunc func(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error

// outlives gives h a context that its client's going away does not
// cancel. dockerd carries a container's create, start, stop, restart,
// kill and removal (and the other changes of state wrapped with this)
// through to their end whether or not the client that asked is still
// there, since its daemon's calls for them take no context; clients
// count on it: an interrupted `docker stop` still stops the container,
// and a start whose client timed out still starts it. Streams (attach,
// logs, wait, events, exec start, pulls, pushes, loads, builds) and
// prunes stay tied to their client, as under dockerd.
func outlives(h apiFunc) apiFunc {
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
		return h(context.WithoutCancel(ctx), w, r, vars)
	}
}

type route struct {
	method  string
	pattern *regexp.Regexp
	handler apiFunc
}

type server struct {
	cfg    Config
	log    *slog.Logger
	routes []route
	// statsInterval is the period of streamed stats.
	statsInterval time.Duration
	builds        buildCancels
}

// placeholder is a quoted "{name}" in a route path.
var placeholder = regexp.MustCompile(`\\\{([a-z]+)\\\}`)

// versionPrefix is dockerd's "/v{version:[0-9.]+}" route prefix.
var versionPrefix = regexp.MustCompile(`^/v([0-9.]+)(/.*)$`)

// New returns the Docker Engine API handler serving cfg's backends.
func New(cfg Config) http.Handler {
	if cfg.MinAPIVersion == "" {
		cfg.MinAPIVersion = defaultMinAPIVersion
	}
	if cfg.APIVersion == "" {
		cfg.APIVersion = defaultAPIVersion
	}
	if cfg.Version == "" {
		cfg.Version = defaultVersion
	}
	s := &server{cfg: cfg, log: cfg.Logger, statsInterval: defaultStatsInterval}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.initRoutes()
	return s
}

// handle registers h for method and a dockerd-style path in which
// "{name}" matches anything, slashes included (dockerd's "{name:.*}").
func (s *server) handle(method, path string, h apiFunc) {
	expr := placeholder.ReplaceAllString(regexp.QuoteMeta(path), `(?P<$1>.*)`)
	s.routes = append(s.routes, route{method: method, pattern: regexp.MustCompile("^" + expr + "$"), handler: h})
}

func (s *server) initRoutes() {
	s.handle(http.MethodOptions, "{anyroute}", func(context.Context, http.ResponseWriter, *http.Request, map[string]string) error { return nil })
	s.handle(http.MethodGet, "/_ping", s.ping)
	s.handle(http.MethodHead, "/_ping", s.ping)
	s.handle(http.MethodGet, "/version", s.getVersion)
	s.handle(http.MethodGet, "/info", s.getInfo)

	// Container routes, in dockerd's order: literal paths come before the
	// greedy "{name}" ones that would otherwise swallow them.
	s.handle(http.MethodGet, "/containers/json", s.listContainers)
	s.handle(http.MethodGet, "/containers/{name}/json", s.inspectContainer)
	s.handle(http.MethodGet, "/containers/{name}/logs", s.containerLogs)
	s.handle(http.MethodPost, "/containers/create", outlives(s.createContainer))
	s.handle(http.MethodPost, "/containers/{name}/kill", outlives(s.killContainer))
	s.handle(http.MethodPost, "/containers/{name}/restart", outlives(s.restartContainer))
	s.handle(http.MethodPost, "/containers/{name}/start", outlives(s.startContainer))
	s.handle(http.MethodPost, "/containers/{name}/stop", outlives(s.stopContainer))
	s.handle(http.MethodPost, "/containers/{name}/wait", s.waitContainer)
	s.handle(http.MethodPost, "/containers/{name}/resize", s.resizeContainer)
	s.handle(http.MethodPost, "/containers/{name}/attach", s.attachContainer)
	s.handle(http.MethodGet, "/containers/{name}/attach/ws", s.attachContainerWS)
	s.handle(http.MethodGet, "/containers/{name}/checkpoints", s.listCheckpoints)
	s.handle(http.MethodPost, "/containers/{name}/checkpoints", outlives(s.createCheckpoint))
	s.handle(http.MethodDelete, "/containers/{name}/checkpoints/{checkpoint}", outlives(s.deleteCheckpoint))
	s.handle(http.MethodDelete, "/containers/{name}", outlives(s.removeContainer))
	s.handle(http.MethodPost, "/husk/containers/{name}/fork", outlives(s.forkContainer))

	s.handle(http.MethodPost, "/containers/{name}/exec", outlives(s.createExec))
	s.handle(http.MethodPost, "/exec/{name}/start", s.startExec)
	s.handle(http.MethodPost, "/exec/{name}/resize", s.resizeExec)
	s.handle(http.MethodGet, "/exec/{name}/json", s.inspectExec)
	s.handle(http.MethodHead, "/containers/{name}/archive", s.headArchive)
	s.handle(http.MethodGet, "/containers/{name}/archive", s.getArchive)
	s.handle(http.MethodPut, "/containers/{name}/archive", s.putArchive)
	s.handle(http.MethodPost, "/containers/prune", s.pruneContainers)
	s.handle(http.MethodPost, "/containers/{name}/rename", outlives(s.renameContainer))
	s.handle(http.MethodPost, "/containers/{name}/pause", outlives(s.pauseContainer))
	s.handle(http.MethodPost, "/containers/{name}/unpause", outlives(s.unpauseContainer))
	s.handle(http.MethodGet, "/containers/{name}/top", s.topContainer)

	s.handle(http.MethodGet, "/images/json", s.listImages)
	s.handle(http.MethodGet, "/images/get", s.saveImages)
	s.handle(http.MethodGet, "/images/search", s.searchImages)
	s.handle(http.MethodGet, "/distribution/{name}/json", s.inspectDistribution)
	s.handle(http.MethodGet, "/images/{name}/get", s.saveImages)
	s.handle(http.MethodGet, "/images/{name}/json", s.inspectImage)
	s.handle(http.MethodPost, "/images/load", s.loadImages)
	s.handle(http.MethodPost, "/images/create", s.createImage)
	s.handle(http.MethodPost, "/images/{name}/tag", outlives(s.tagImage))
	s.handle(http.MethodDelete, "/images/{name}", outlives(s.removeImage))

	s.initNetworkRoutes()
	s.handle(http.MethodGet, "/images/{name}/history", s.getImageHistory)
	s.handle(http.MethodPost, "/images/{name}/push", s.pushImage)
	s.handle(http.MethodPost, "/build", s.postBuild)
	s.handle(http.MethodPost, "/build/cancel", s.postBuildCancel)
	if s.cfg.BuildKit != nil {
		s.handle(http.MethodPost, "/grpc", s.postGRPC)
		s.handle(http.MethodPost, "/session", s.postSession)
	}
	s.initVolumeRoutes()
	s.handle(http.MethodGet, "/events", s.getEvents)
	s.handle(http.MethodGet, "/containers/{name}/stats", s.getStats)
	s.handle(http.MethodGet, "/containers/{name}/changes", s.containerChanges)
	s.handle(http.MethodGet, "/containers/{name}/export", s.exportContainer)
	s.handle(http.MethodPost, "/commit", outlives(s.postCommit))
	s.handle(http.MethodPost, "/containers/{name}/update", outlives(s.updateContainer))
	s.handle(http.MethodPost, "/images/prune", s.pruneImages)
	s.handle(http.MethodGet, "/system/df", s.getDiskUsage)
	s.handle(http.MethodPost, "/build/prune", s.postBuildPrune)
	s.handle(http.MethodPost, "/auth", s.postAuth)
	s.initSwarmRoutes()
}

// ServeHTTP routes r the way dockerd's gorilla/mux setup does: every route
// exists with and without a "/v1.NN" prefix, and anything unmatched
// (including a known path with another method) is a JSON 404.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// dockerd sets these in middlewares of matched routes only; setting
	// them on every answer costs nothing and lets a client that probes an
	// unknown route still learn the server's API version.
	h := w.Header()
	h.Set("Server", fmt.Sprintf("Docker/%s (linux)", s.cfg.Version))
	h.Set("Api-Version", s.cfg.APIVersion)
	h.Set("Ostype", "linux")
	h.Set("Docker-Experimental", "true")

	path, version := r.URL.Path, ""
	if m := versionPrefix.FindStringSubmatch(path); m != nil {
		version, path = m[1], m[2]
	}
	for _, rt := range s.routes {
		if rt.method != r.Method {
			continue
		}
		m := rt.pattern.FindStringSubmatch(path)
		if m == nil {
			continue
		}
		vars := map[string]string{}
		for i, name := range rt.pattern.SubexpNames() {
			if name != "" {
				vars[name] = m[i]
			}
		}
		s.serve(w, r, rt, version, vars)
		return
	}
	_ = writeJSON(w, http.StatusNotFound, &common.ErrorResponse{Message: "page not found"})
}

type apiVersionKey struct{}

// apiVersion is the version the client asked for, or the server's own.
func apiVersion(ctx context.Context) string {
	v, _ := ctx.Value(apiVersionKey{}).(string)
	return v
}

func (s *server) serve(w http.ResponseWriter, r *http.Request, rt route, version string, vars map[string]string) {
	s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "version", version)
	tw := &trackingWriter{ResponseWriter: w}
	err := s.checkVersion(version)
	if err == nil {
		if version == "" {
			version = s.cfg.APIVersion
		}
		ctx := context.WithValue(r.Context(), apiVersionKey{}, version)
		r = r.WithContext(ctx)
		err = rt.handler(ctx, tw, r, vars)
	}
	if err == nil {
		return
	}
	log := s.log.With("method", r.Method, "path", r.URL.Path, "error", err)
	if r.Context().Err() != nil {
		// Nobody to answer. The error may be the client's leaving
		// itself, or, for a request that outlives its client, the
		// request's own failure.
		log.Info("client gone before the answer")
		return
	}
	if tw.wrote {
		// The answer is under way; all that can be done is to say so in
		// the log.
		log.Error("handler failed after writing its response")
		return
	}
	status := errhttp.ToHTTP(err)
	if status >= http.StatusInternalServerError {
		log.Error("handler returned error", "status", status)
	}
	// dockerd answers clients older than its oldest supported version in
	// plain text, so that they print a readable message.
	if version != "" && versionLess(version, "1.24") {
		http.Error(w, err.Error(), status)
		return
	}
	_ = writeJSON(w, status, &common.ErrorResponse{Message: err.Error()})
}

// versionError is dockerd's versionUnsupportedError.
type versionError struct {
	version, min, max string
}

func (e versionError) Error() string {
	if e.min != "" {
		return fmt.Sprintf("client version %s is too old. Minimum supported API version is %s, please upgrade your client to a newer version", e.version, e.min)
	}
	return fmt.Sprintf("client version %s is too new. Maximum supported API version is %s", e.version, e.max)
}

// InvalidParameter marks versionError as errdefs' invalid argument (400).
func (versionError) InvalidParameter() {}

func (s *server) checkVersion(version string) error {
	if version == "" {
		return nil
	}
	if versionLess(version, s.cfg.MinAPIVersion) {
		return versionError{version: version, min: s.cfg.MinAPIVersion}
	}
	if versionLess(s.cfg.APIVersion, version) {
		return versionError{version: version, max: s.cfg.APIVersion}
	}
	return nil
}

// versionLess compares dotted versions numerically, as moby's
// internal/versions does: missing or non-numeric parts count as 0.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// trackingWriter remembers whether the response has started, so that a
// late error is not written into the middle of a stream.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// Hijack hands the connection over and records that the response has
// started: the connection left net/http's hands. x/net's WebSocket server
// asks the writer for it directly, not through a ResponseController.
func (t *trackingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(t.ResponseWriter).Hijack()
	if err == nil {
		t.wrote = true
	}
	return conn, brw, err
}

func writeJSON(w http.ResponseWriter, code int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	return encodeJSON(w, v)
}

// encodeJSON writes v as dockerd does: one line, HTML characters as they
// are.
func encodeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// flush pushes buffered output to the client; a writer that cannot flush
// simply delivers later.
func flush(w http.ResponseWriter) {
	_ = http.NewResponseController(w).Flush()
}
