package host

import (
	"context"

	"github.com/husk-vm/husk/shim/proto"
)

// MountRoot has the agent mount a container root from the VM's disks
// ahead of its setup (proto.OpMountRoot).
func (c *Client) MountRoot(ctx context.Context, spec proto.MountRootSpec) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpMountRoot, MountRoot: &spec})
	return err
}
