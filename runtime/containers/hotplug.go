package containers

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/network"

	husknet "github.com/husk-vm/husk/runtime/network"
	"github.com/husk-vm/husk/runtime/vmm"
)

// hotplugTimeout bounds one NIC hot-plug or unplug with the guest's part
// of it: ACPI hot-plug, the driver's probe and the agent's configuration
// take seconds under TCG on a busy host, never minutes.
const hotplugTimeout = 2 * time.Minute

// HotplugNetwork is what connecting and disconnecting a running
// container asks of the Network beyond booting it; *husknet.Manager is
// the real one. A Network without it leaves running containers'
// networks as they booted.
type HotplugNetwork interface {
	ConnectRunning(ctx context.Context, containerID, name string, cfg *network.EndpointSettings) (*husknet.Plug, error)
	Unplugging(containerID, name string) (*husknet.Unplug, error)
	DisconnectRunning(ctx context.Context, containerID, name string) error
}

// hotplug is what changing a running container's networks needs, or an
// error in dockerd's class when it cannot be done. Callers hold c.mu.
func (c *ctr) hotplug(what string) (HotplugNetwork, vmm.NICHotplugger, error) {
	r := c.run
	if !c.rec.State.Running || c.rec.State.Paused {
		return nil, nil, errdefs.ErrConflict.WithMessage(fmt.Sprintf("cannot %s container %s: it is %s", what, c.rec.Name, c.rec.State.Status))
	}
	hn, ok := c.m.net.(HotplugNetwork)
	if !ok {
		return nil, nil, errdefs.ErrNotImplemented.WithMessage(fmt.Sprintf("cannot %s running container %s: this daemon's networks cannot change a running VM", what, c.rec.Name))
	}
	hp, ok := r.machine.(vmm.NICHotplugger)
	if !ok {
		return nil, nil, errdefs.ErrNotImplemented.WithMessage(fmt.Sprintf("cannot %s running container %s: its VMM cannot hot-plug network interfaces; stop it, change its networks and start it again", what, c.rec.Name))
	}
	return hn, hp, nil
}

// connectRunning joins the running container to network name: an
// endpoint on the host, a NIC hot-plugged into the VM, the interface
// configured by the agent. On error all three are undone. Callers hold
// c.mu.
func (c *ctr) connectRunning(ctx context.Context, name string, ep *network.EndpointSettings) (err error) {
	hn, hp, err := c.hotplug("connect")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, hotplugTimeout)
	defer cancel()
	undo := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), hotplugTimeout)
	}
	plug, err := hn.ConnectRunning(ctx, c.rec.ID, name, ep)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			uctx, cancel := undo()
			defer cancel()
			if derr := hn.DisconnectRunning(uctx, c.rec.ID, name); derr != nil {
				c.m.log.Error("release the endpoint of a failed connect", "id", c.rec.ID[:12], "network", name, "err", derr)
			}
		}
	}()
	if err := hp.AddNIC(ctx, plug.Net); err != nil {
		return fmt.Errorf("connect %s to %s: hot-plug a NIC: %w", c.rec.Name, name, err)
	}
	defer func() {
		if err != nil {
			uctx, cancel := undo()
			defer cancel()
			if rerr := hp.RemoveNIC(uctx, plug.Net.MAC); rerr != nil {
				c.m.log.Error("unplug the NIC of a failed connect", "id", c.rec.ID[:12], "network", name, "err", rerr)
			}
		}
	}()
	if err := c.run.client.AddInterface(ctx, plug.Change); err != nil {
		return fmt.Errorf("connect %s to %s: configure %s in the guest: %w", c.rec.Name, name, plug.Change.Interface.Name, err)
	}
	c.addNetworkLocked(name, ep)
	c.emitNetworkLocked(events.ActionConnect, name)
	return c.save()
}

// disconnectRunning takes the running container off network name: the
// agent deconfigures the interface, the NIC is unplugged, then the
// endpoint goes on the host. Callers hold c.mu.
func (c *ctr) disconnectRunning(ctx context.Context, name string) error {
	hn, hp, err := c.hotplug("disconnect")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, hotplugTimeout)
	defer cancel()
	un, err := hn.Unplugging(c.rec.ID, name)
	if errdefs.IsNotFound(err) {
		// A network without an endpoint (none): only the configuration
		// changes.
		delete(c.rec.Networks, name)
		return c.save()
	}
	if err != nil {
		return err
	}
	if err := c.run.client.RemoveInterface(ctx, un.Change); err != nil {
		return fmt.Errorf("disconnect %s from %s: deconfigure %s in the guest: %w", c.rec.Name, name, un.Change.Interface.Name, err)
	}
	if err := hp.RemoveNIC(ctx, un.MAC); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("disconnect %s from %s: unplug its NIC: %w", c.rec.Name, name, err)
	}
	if err := hn.DisconnectRunning(ctx, c.rec.ID, name); err != nil {
		c.m.log.Warn("release the endpoint of a disconnected network", "id", c.rec.ID[:12], "network", name, "err", err)
	}
	c.emitNetworkLocked(events.ActionDisconnect, name)
	delete(c.rec.Networks, name)
	return c.save()
}

// addNetworkLocked records that the container is on network name.
func (c *ctr) addNetworkLocked(name string, ep *network.EndpointSettings) {
	if c.rec.Networks == nil {
		c.rec.Networks = map[string]*network.EndpointSettings{}
	}
	c.rec.Networks[name] = ep
}
