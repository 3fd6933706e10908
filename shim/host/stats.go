package host

import (
	"context"
	"errors"

	"github.com/husk-vm/husk/shim/proto"
)

// Stats samples the guest's resource usage; the process names the PID
// namespace whose tasks are counted.
func (p *Process) Stats(ctx context.Context) (*proto.GuestStats, error) {
	resp, err := p.c.simple(ctx, proto.Request{Op: proto.OpStats, ID: p.id})
	if err != nil {
		return nil, err
	}
	p.setPid(resp.Pid)
	if resp.Stats == nil {
		return nil, errors.New("agent answered stats without a sample")
	}
	return resp.Stats, nil
}
