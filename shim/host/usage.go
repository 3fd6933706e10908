package host

import (
	"context"
	"errors"

	"github.com/husk-vm/husk/shim/proto"
)

// LayerSize measures the container's writable layer in the guest
// (proto.OpLayerSize).
func (c *Client) LayerSize(ctx context.Context) (int64, error) {
	resp, err := c.simple(ctx, proto.Request{Op: proto.OpLayerSize})
	if err != nil {
		return 0, err
	}
	if resp.LayerSize == nil {
		return 0, errors.New("layer-size: the agent answered no size")
	}
	return *resp.LayerSize, nil
}
