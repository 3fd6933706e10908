// Package buildkitapi serves the two endpoints through which buildx's
// "docker" driver reaches a daemon's BuildKit: POST /grpc, BuildKit's
// control API over h2c, and POST /session, the client's session, which
// carries the build context and registry credentials back to the daemon.
// `docker compose build`, `docker buildx build` and `docker build` with
// buildx installed all build through them; a daemon without /grpc sends
// buildx off to start BuildKit in a container of its own instead.
//
// husk has no BuildKit solver, so this package translates: a Dockerfile
// solve (the dockerfile.v0 frontend) pulls the context through the
// session's file sync, turns the frontend's attributes into build options
// and runs husk's own builder, the one POST /build uses; the builder's
// steps become the vertexes the client draws, and the moby exporter's
// image names become tags. buildx's capability probe, a gateway build
// that only pings and returns, is answered too. LLB definitions, other
// frontends and other exporters are refused with gRPC errors that say so.
// The transport is BuildKit's own libraries (the session manager, file
// sync, the generated gRPC services); only the control service is ours.
package buildkitapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	controlapi "github.com/moby/buildkit/api/services/control"
	gatewayapi "github.com/moby/buildkit/frontend/gateway/pb"
	"github.com/moby/buildkit/session"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"

	"github.com/husk-vm/husk/imagebuild/builder"
)

// Builder runs a Dockerfile build, as for POST /build.
type Builder interface {
	Build(ctx context.Context, opts builder.BuildOptions, out builder.Output) (string, error)
}

// Options configures a Server.
type Options struct {
	// TempDir holds build contexts while they are synced. It is the
	// Server's own: New empties it, dropping what a crash left.
	TempDir string
	// Version is the daemon's version, reported as BuildKit's.
	Version string
	// Files, when set, lets builds be exported to the client as a
	// directory or a tar (docker build -o).
	Files  ImageFiles
	Logger *slog.Logger
}

// Server serves /grpc and /session for one daemon.
type Server struct {
	builder  Builder
	opts     Options
	log      *slog.Logger
	sessions *session.Manager
	grpc     *grpc.Server
	h2       *http2.Server
	jobs     *jobs
}

// New returns a Server that builds with b.
func New(b Builder, opts Options) (*Server, error) {
	if opts.TempDir == "" {
		return nil, errors.New("buildkit endpoints: no directory for build contexts")
	}
	if err := os.RemoveAll(opts.TempDir); err != nil {
		return nil, fmt.Errorf("clear %s: %w", opts.TempDir, err)
	}
	if err := os.MkdirAll(opts.TempDir, 0o700); err != nil {
		return nil, fmt.Errorf("make %s: %w", opts.TempDir, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sm, err := session.NewManager()
	if err != nil {
		return nil, fmt.Errorf("buildkit session manager: %w", err)
	}
	s := &Server{builder: b, opts: opts, log: log, sessions: sm, h2: &http2.Server{}, jobs: newJobs()}
	s.grpc = grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			log.Debug("buildkit call", "method", info.FullMethod, "err", err)
			return resp, err
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			err := h(srv, ss)
			log.Debug("buildkit stream", "method", info.FullMethod, "err", err)
			return err
		}),
	)
	controlapi.RegisterControlServer(s.grpc, &control{s: s})
	gatewayapi.RegisterLLBBridgeServer(s.grpc, &bridge{s: s})
	return s, nil
}

// ServeGRPC is POST /grpc: the connection is upgraded to h2c and serves
// the control API until the client closes it.
func (s *Server) ServeGRPC(w http.ResponseWriter, r *http.Request) error {
	h, ok := w.(http.Hijacker)
	if !ok {
		return errors.New("handler does not support hijack")
	}
	switch proto := r.Header.Get("Upgrade"); proto {
	case "h2c":
	case "":
		return errors.New("no upgrade proto in request")
	default:
		return fmt.Errorf("protocol %s not supported", proto)
	}
	conn, _, err := h.Hijack()
	if err != nil {
		return fmt.Errorf("hijack /grpc: %w", err)
	}
	resp := &http.Response{StatusCode: http.StatusSwitchingProtocols, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}}
	resp.Header.Set("Connection", "Upgrade")
	resp.Header.Set("Upgrade", "h2c")
	if err := resp.Write(conn); err != nil {
		conn.Close()
		return nil
	}
	s.h2.ServeConn(conn, &http2.ServeConnOpts{Context: r.Context(), Handler: s.grpc})
	return nil
}

// ServeSession is POST /session: the client's session, held until it
// ends; solves reach the client through it.
func (s *Server) ServeSession(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	return s.sessions.HandleHTTPRequest(ctx, w, r)
}

// Close stops serving the control API's connections.
func (s *Server) Close() { s.grpc.Stop() }
