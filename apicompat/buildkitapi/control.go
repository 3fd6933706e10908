package buildkitapi

import (
	"context"
	"os"
	"strings"
	"time"

	controlapi "github.com/moby/buildkit/api/services/control"
	apitypes "github.com/moby/buildkit/api/types"
	"github.com/moby/buildkit/client/buildid"
	gatewayapi "github.com/moby/buildkit/frontend/gateway/pb"
	opspb "github.com/moby/buildkit/solver/pb"
	apicapspb "github.com/moby/buildkit/util/apicaps/pb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// control is BuildKit's control service.
type control struct {
	controlapi.UnimplementedControlServer
	s *Server
}

func (c *control) Solve(ctx context.Context, req *controlapi.SolveRequest) (*controlapi.SolveResponse, error) {
	j := c.s.jobs.start(req.Ref)
	defer c.s.jobs.finish(req.Ref, j)
	switch {
	case req.Frontend == "" && len(req.GetDefinition().GetDef()) == 0:
		return c.s.gatewayBuild(ctx, req, j)
	case req.Frontend == "":
		return nil, status.Error(codes.Unimplemented, "husk builds Dockerfiles only: LLB definitions are not supported")
	case req.Frontend != "dockerfile.v0":
		return nil, status.Errorf(codes.Unimplemented, "frontend %q is not supported by husk: only dockerfile.v0", req.Frontend)
	}
	plan, err := c.s.planExport(req)
	if err != nil {
		return nil, err
	}
	id, err := c.s.solveDockerfile(ctx, req.Ref, req.Session, req.FrontendAttrs, plan, j)
	if err != nil {
		return nil, err
	}
	return exported(id, plan), nil
}

// gatewayBuild is the Control.Solve of a build the client drives through
// the gateway: it waits for the client's Return and reports what the
// gateway Solve built.
func (s *Server) gatewayBuild(ctx context.Context, req *controlapi.SolveRequest, j *job) (*controlapi.SolveResponse, error) {
	plan, err := s.planExport(req)
	j.setReady(req.Session, plan, err)
	if err != nil {
		return nil, err
	}
	select {
	case <-j.returned:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if j.ret != nil && j.ret.Code != int32(codes.OK) {
		return nil, status.ErrorProto(j.ret)
	}
	return exported(j.builtImage(), plan), nil
}

// exported is the exporters' answer for image id: the image exporter's
// digest and names, and nothing for an export to the client only.
func exported(id string, plan exportPlan) *controlapi.SolveResponse {
	if id == "" || !plan.image {
		return &controlapi.SolveResponse{}
	}
	resp := map[string]string{
		"containerimage.config.digest": id,
		"containerimage.digest":        id,
	}
	if len(plan.tags) > 0 {
		resp["image.name"] = strings.Join(plan.tags, ",")
	}
	return &controlapi.SolveResponse{ExporterResponse: resp}
}

// Status streams a solve's progress until it ends.
func (c *control) Status(req *controlapi.StatusRequest, stream grpc.ServerStreamingServer[controlapi.StatusResponse]) error {
	j := c.s.jobs.get(req.Ref)
	defer c.s.jobs.abandon(req.Ref, j)
	sent := 0
	for {
		updates, done, changed := j.since(sent)
		for _, u := range updates {
			if err := stream.Send(u); err != nil {
				return err
			}
		}
		sent += len(updates)
		if done && len(updates) == 0 {
			return nil
		}
		if done {
			continue
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
}

func (c *control) ListWorkers(context.Context, *controlapi.ListWorkersRequest) (*controlapi.ListWorkersResponse, error) {
	return &controlapi.ListWorkersResponse{Record: c.s.workers()}, nil
}

func (c *control) Info(context.Context, *controlapi.InfoRequest) (*controlapi.InfoResponse, error) {
	return &controlapi.InfoResponse{BuildkitVersion: c.s.version()}, nil
}

// DiskUsage reports nothing: husk's build cache is images, which
// GET /system/df counts.
func (c *control) DiskUsage(context.Context, *controlapi.DiskUsageRequest) (*controlapi.DiskUsageResponse, error) {
	return &controlapi.DiskUsageResponse{}, nil
}

// Prune has nothing of BuildKit's to prune; POST /build/prune prunes
// husk's build cache.
func (c *control) Prune(*controlapi.PruneRequest, grpc.ServerStreamingServer[controlapi.UsageRecord]) error {
	return nil
}

func (s *Server) version() *apitypes.BuildkitVersion {
	return &apitypes.BuildkitVersion{Package: "github.com/husk-vm/husk", Version: s.opts.Version}
}

// workers is the one worker a husk daemon has: linux/amd64, as its
// build VMs. No snapshotter label: buildx takes that for the containerd
// image store and would ask for exporters husk lacks.
func (s *Server) workers() []*apitypes.WorkerRecord {
	host, _ := os.Hostname()
	return []*apitypes.WorkerRecord{{
		ID: "husk",
		Labels: map[string]string{
			"org.mobyproject.buildkit.worker.executor": "husk",
			"org.mobyproject.buildkit.worker.hostname": host,
		},
		Platforms:       []*opspb.Platform{{OS: "linux", Architecture: "amd64"}},
		BuildkitVersion: s.version(),
	}}
}

// bridge is the gateway service a client-driven build talks to. husk
// answers the ping (with the one capability such a build needs: to
// return) and the return; a build that asks to solve anything is told
// it cannot.
type bridge struct {
	gatewayapi.UnimplementedLLBBridgeServer
	s *Server
}

func (b *bridge) Ping(context.Context, *gatewayapi.PingRequest) (*gatewayapi.PongResponse, error) {
	return &gatewayapi.PongResponse{
		FrontendAPICaps: []*apicapspb.APICap{{ID: string(gatewayapi.CapReturnResult), Enabled: true}},
		LLBCaps:         []*apicapspb.APICap{},
		Workers:         b.s.workers(),
	}, nil
}

// Solve builds a Dockerfile for a client-driven build, once that build's
// Control.Solve has said where its session is, and answers with the
// image as the result's one ref.
func (b *bridge) Solve(ctx context.Context, req *gatewayapi.SolveRequest) (*gatewayapi.SolveResponse, error) {
	switch {
	case len(req.GetDefinition().GetDef()) > 0 || req.Frontend == "":
		return nil, status.Error(codes.Unimplemented, "husk builds Dockerfiles only: LLB definitions are not supported")
	case req.Frontend != "dockerfile.v0":
		return nil, status.Errorf(codes.Unimplemented, "frontend %q is not supported by husk: only dockerfile.v0", req.Frontend)
	}
	id := buildid.FromIncomingContext(ctx)
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "no build ID in the request")
	}
	j := b.s.jobs.get(id)
	defer b.s.jobs.abandon(id, j)
	select {
	case <-j.ready:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	session, plan, refused := j.target()
	if refused != nil {
		return nil, refused
	}
	image, err := b.s.solveDockerfile(ctx, id, session, req.FrontendOpt, plan, j)
	if err != nil {
		return nil, err
	}
	j.setImage(image)
	return &gatewayapi.SolveResponse{Ref: image, Result: &gatewayapi.Result{
		Result: &gatewayapi.Result_RefDeprecated{RefDeprecated: image},
	}}, nil
}

func (b *bridge) Return(ctx context.Context, req *gatewayapi.ReturnRequest) (*gatewayapi.ReturnResponse, error) {
	id := buildid.FromIncomingContext(ctx)
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "no build ID in the request")
	}
	// The return may overtake its Solve; a job no Solve takes up is
	// forgotten later.
	j := b.s.jobs.get(id)
	time.AfterFunc(jobLinger, func() { b.s.jobs.abandon(id, j) })
	j.returnResult(req.Error)
	return &gatewayapi.ReturnResponse{}, nil
}
