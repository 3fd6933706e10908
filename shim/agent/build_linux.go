//go:build linux

package agent

import (
	"context"
	"fmt"

	"github.com/husk-vm/husk/shim/proto"
)

// layerOp serves proto.OpApplyLayer and proto.OpCutLayer (see
// shim/proto/build.go) for build VMs.
func (a *Agent) layerOp(ctx context.Context, s *stream, req *proto.Request) error {
	lr, ok := a.opts.Rootfs.(LayerRootfs)
	if !ok {
		return &agentError{proto.KindInvalid, fmt.Sprintf("%s: this root cannot stack layers", req.Op)}
	}
	a.mu.Lock()
	ready := a.root != ""
	var running string
	for id, p := range a.procs {
		select {
		case <-p.exited:
		default:
			running = id
		}
	}
	a.mu.Unlock()
	switch {
	case !ready:
		return &agentError{proto.KindInvalid, fmt.Sprintf("%s: the container root is not set up", req.Op)}
	case running != "":
		return &agentError{proto.KindInvalid, fmt.Sprintf("%s: process %s is still running", req.Op, running)}
	}
	if err := s.respond(proto.Response{}); err != nil {
		return nil
	}
	var err error
	if req.Op == proto.OpApplyLayer {
		err = lr.ApplyLayer(ctx, s)
	} else {
		err = lr.CutLayer(ctx, s.Conn)
	}
	if err != nil {
		a.log.Error("layer operation failed", "op", req.Op, "err", err)
		if req.Op == proto.OpCutLayer {
			// The tar may be cut short; ending the stream without the
			// closing Response tells the host to throw it away.
			return nil
		}
		_ = s.respond(errResponse(err))
		return nil
	}
	_ = s.respond(proto.Response{})
	return nil
}
