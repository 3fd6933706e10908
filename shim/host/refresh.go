package host

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// Freshen sets the guest's clock to the host's, mixes host entropy into
// its RNG and, with identity, makes a restored copy the container the host
// says it is (Refresh). A restored guest's clock is its snapshot's; a
// booted one's comes from an RTC read to the whole second.
func (c *Client) Freshen(ctx context.Context, identity *proto.IdentitySpec) error {
	entropy := make([]byte, 64)
	if _, err := rand.Read(entropy); err != nil {
		return fmt.Errorf("entropy for the guest: %w", err)
	}
	return c.Refresh(ctx, proto.RefreshSpec{TimeUnixNano: time.Now().UnixNano(), Entropy: entropy, Identity: identity})
}

// Refresh asks the agent to set the guest clock and reseed its RNG after a
// restore or a boot (proto.OpRefresh).
func (c *Client) Refresh(ctx context.Context, spec proto.RefreshSpec) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpRefresh, Refresh: &spec})
	return err
}

// SetLimits changes the limits of the running container (OpLimits).
func (c *Client) SetLimits(ctx context.Context, spec proto.LimitsSpec) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpLimits, Limits: &spec})
	return err
}
