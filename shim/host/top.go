package host

import (
	"context"

	"github.com/husk-vm/husk/shim/proto"
)

// Top lists the processes in the PID namespace of the process.
func (p *Process) Top(ctx context.Context) ([]proto.ProcessInfo, error) {
	resp, err := p.c.simple(ctx, proto.Request{Op: proto.OpTop, ID: p.id})
	p.setPid(resp.Pid)
	return resp.Processes, err
}
