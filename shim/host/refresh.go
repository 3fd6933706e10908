package host

import (
	"context"

	"github.com/husk-vm/husk/shim/proto"
)

// Refresh asks the agent to set the guest clock and reseed its RNG after a
// restore (proto.OpRefresh).
func (c *Client) Refresh(ctx context.Context, spec proto.RefreshSpec) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpRefresh, Refresh: &spec})
	return err
}

// SetLimits changes the limits of the running container (OpLimits).
func (c *Client) SetLimits(ctx context.Context, spec proto.LimitsSpec) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpLimits, Limits: &spec})
	return err
}
