package host

import (
	"context"

	"github.com/husk-vm/husk/shim/proto"
)

// AddInterface has the agent configure a NIC the host hot-plugged.
func (c *Client) AddInterface(ctx context.Context, spec proto.InterfaceChangeSpec) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpAddInterface, Interface: &spec})
	return err
}

// RemoveInterface has the agent deconfigure a NIC the host will unplug.
func (c *Client) RemoveInterface(ctx context.Context, spec proto.InterfaceChangeSpec) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpRemoveInterface, Interface: &spec})
	return err
}
