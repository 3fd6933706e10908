package host

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// ApplyLayer stacks the OCI layer tar read from r on the root of a build
// VM (proto.OpApplyLayer).
func (c *Client) ApplyLayer(ctx context.Context, r io.Reader) error {
	cl, _, err := c.do(ctx, proto.Request{Op: proto.OpApplyLayer})
	if err != nil {
		return err
	}
	defer cl.Close()
	stop := context.AfterFunc(ctx, func() { cl.st.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_, werr := io.Copy(cl.st, r)
	// The agent answers once it has read the tar to its end, or at once
	// when it failed; an answer explains a write error best.
	resp, rerr := cl.readResponse()
	switch {
	case rerr == nil && resp.Error != "":
		return &AgentError{Kind: resp.Kind, Message: resp.Error}
	case ctx.Err() != nil:
		return ctx.Err()
	case werr != nil:
		return fmt.Errorf("send layer to the agent: %w", werr)
	case rerr != nil:
		return fmt.Errorf("apply layer: %w", rerr)
	}
	return nil
}

// CutLayer writes the changes of a build VM's root since the last cut or
// applied layer to w as an OCI layer tar (proto.OpCutLayer). On error, what
// was written to w is incomplete.
func (c *Client) CutLayer(ctx context.Context, w io.Writer) error {
	return c.receiveTar(ctx, proto.Request{Op: proto.OpCutLayer}, w)
}
