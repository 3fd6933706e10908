package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// Freshen sets the guest's clock to the host's, mixes host entropy into
// its RNG and, with identity, makes a restored copy the container the host
// says it is (Refresh). A restored guest's clock is its snapshot's; a
// booted one's comes from an RTC read to the whole second.
//
// The refresh leaves the guest's clock behind by however long the request
// took to reach the agent, so once it is answered Freshen goes on, in the
// background for as long as the client lives, to correct that (SyncClock)
// beside whatever the caller sends next. A guest whose agent cannot shift
// its clock keeps the refresh's.
func (c *Client) Freshen(ctx context.Context, identity *proto.IdentitySpec) error {
	entropy := make([]byte, 64)
	if _, err := rand.Read(entropy); err != nil {
		return fmt.Errorf("entropy for the guest: %w", err)
	}
	if err := c.Refresh(ctx, proto.RefreshSpec{TimeUnixNano: time.Now().UnixNano(), Entropy: entropy, Identity: identity}); err != nil {
		return err
	}
	go func() {
		ctx, cancel := context.WithTimeout(c.life, clockSyncTimeout)
		defer cancel()
		_, _ = c.SyncClock(ctx)
	}()
	return nil
}

// clockSyncTimeout bounds Freshen's clock sync, which a guest that stops
// answering must not hold up forever.
const clockSyncTimeout = 30 * time.Second

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

// Freeze freezes the container's processes, or thaws them (proto.OpFreeze);
// a thaw waits for the last refresh's reseed. An agent from before the op
// answers with an error wrapping errors.ErrUnsupported: it froze nothing,
// so it has nothing to thaw either.
func (c *Client) Freeze(ctx context.Context, frozen bool) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpFreeze, Freeze: &proto.FreezeSpec{Frozen: frozen}})
	if unknownOp(err) {
		return fmt.Errorf("freeze: the guest's agent predates it: %w", errors.ErrUnsupported)
	}
	return err
}

// unknownOp says err is how an agent answers an op it does not know: today's
// agents say so, and older ones looked for a process of the request's empty
// ID.
func unknownOp(err error) bool {
	var ae *AgentError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Kind == proto.KindInvalid && strings.HasPrefix(ae.Message, "unknown op ") ||
		ae.Kind == proto.KindNoProcess && ae.Message == "no such process: "
}
