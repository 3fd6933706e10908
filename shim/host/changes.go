package host

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// Changes lists what the container's writable layer changes relative to
// its image (proto.OpChanges).
func (c *Client) Changes(ctx context.Context) ([]proto.Change, error) {
	resp, err := c.simple(ctx, proto.Request{Op: proto.OpChanges})
	if err != nil {
		return nil, err
	}
	return resp.Changes, nil
}

// DiffLayer writes the container's writable layer to w as an OCI layer
// tar, freezing its disk meanwhile when freeze is set
// (proto.OpDiffLayer). On error, what was written to w is incomplete.
func (c *Client) DiffLayer(ctx context.Context, freeze bool, w io.Writer) error {
	return c.receiveTar(ctx, proto.Request{Op: proto.OpDiffLayer, Diff: &proto.DiffSpec{Freeze: freeze}}, w)
}

// Export writes a tar of the container's whole filesystem to w
// (proto.OpExport). On error, what was written to w is incomplete.
func (c *Client) Export(ctx context.Context, w io.Writer) error {
	return c.receiveTar(ctx, proto.Request{Op: proto.OpExport}, w)
}

// receiveTar serves the ops whose answer is a Response, a tar and a
// closing Response: it copies the tar to w and reports whether the agent
// finished it.
func (c *Client) receiveTar(ctx context.Context, req proto.Request, w io.Writer) error {
	cl, _, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer cl.Close()
	stop := context.AfterFunc(ctx, func() { cl.st.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// Reading the tar through archive/tar finds its end exactly: the tee
	// passes on the tar's bytes and nothing of the Response after them.
	tr := tar.NewReader(io.TeeReader(cl.r, w))
	for {
		_, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			_, err = io.Copy(io.Discard, tr)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("receive %s tar: %w (the agent stopped; see the VM's console log)", req.Op, err)
		}
	}
	resp, err := cl.readResponse()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s: the agent did not finish the tar: %w", req.Op, err)
	}
	if resp.Error != "" {
		return &AgentError{Kind: resp.Kind, Message: resp.Error}
	}
	return nil
}
