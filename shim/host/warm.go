package host

import (
	"context"

	"github.com/husk-vm/husk/shim/proto"
)

// Warm has the agent run a throwaway container on two blank disks and
// undo it (proto.OpWarm); the disks can be unplugged once it returns.
func (c *Client) Warm(ctx context.Context, spec proto.WarmSpec) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpWarm, Warm: &spec})
	return err
}
