package containers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/mount"
)

// EventSink receives what happens to containers, for GET /events. Publish
// must not block: it is called with container locks held.
type EventSink interface {
	Publish(typ events.Type, action events.Action, id string, attrs map[string]string)
}

// emitLocked publishes a container event with dockerd's attributes: the
// container's labels, its image as the user named it, its name, and extra.
// Callers hold c.mu.
func (c *ctr) emitLocked(action events.Action, extra map[string]string) {
	if c.m.events == nil {
		return
	}
	attrs := map[string]string{}
	if c.rec.Config != nil {
		maps.Copy(attrs, c.rec.Config.Labels)
	}
	attrs["image"] = c.rec.Image
	attrs["name"] = c.rec.Name
	maps.Copy(attrs, extra)
	c.m.events.Publish(events.ContainerEventType, action, c.rec.ID, attrs)
}

// emitNetworkLocked publishes a network connect or disconnect of the
// container, as dockerd does for each network at start and exit and for
// docker network connect/disconnect of a running container. Callers hold
// c.mu.
func (c *ctr) emitNetworkLocked(action events.Action, netName string) {
	if c.m.events == nil || c.m.net == nil || netName == "" {
		return
	}
	publishNetworkEvent(c.m.events, c.m.net, action, netName, c.rec.ID)
}

// publishNetworkEvent publishes a network connect or disconnect of
// containerID, with dockerd's attributes.
func publishNetworkEvent(sink EventSink, nets Network, action events.Action, netName, containerID string) {
	id, name, err := nets.Resolve(netName)
	if err != nil {
		return
	}
	typ := "bridge"
	if name == "none" {
		typ = "null"
	}
	sink.Publish(events.NetworkEventType, action, id, map[string]string{"container": containerID, "name": name, "type": typ})
}

// emitResourcesLocked publishes what dockerd does around a run: before
// its start event (attached) a network connect per network, then a
// volume mount per volume; after its die event a network disconnect per
// network, then a volume unmount per volume. Callers hold c.mu.
func (c *ctr) emitResourcesLocked(attached bool) {
	if c.m.events == nil {
		return
	}
	netAction, volAction := events.ActionDisconnect, events.ActionUnmount
	if attached {
		netAction, volAction = events.ActionConnect, events.ActionMount
	}
	for _, name := range slices.Sorted(maps.Keys(c.rec.Networks)) {
		c.emitNetworkLocked(netAction, name)
	}
	for _, mp := range c.rec.Mounts {
		if mp.Type != mount.TypeVolume || mp.Name == "" {
			continue
		}
		attrs := map[string]string{"container": c.rec.ID, "driver": mp.Driver}
		if attached {
			attrs["destination"] = mp.Destination
			attrs["propagation"] = string(mp.Propagation)
			attrs["read/write"] = strconv.FormatBool(mp.RW)
		}
		c.m.events.Publish(events.VolumeEventType, volAction, mp.Name, attrs)
	}
}

// emit is emitLocked for callers that do not hold c.mu.
func (c *ctr) emit(action events.Action, extra map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.emitLocked(action, extra)
}

// emitRef publishes an event about the container ref names, if it exists.
func (m *Manager) emitRef(ref string, action events.Action, extra map[string]string) {
	if c, err := m.lookup(ref); err == nil {
		c.emit(action, extra)
	}
}

// signalAttrs is a kill event's attributes.
func signalAttrs(sig syscall.Signal) map[string]string {
	return map[string]string{"signal": strconv.Itoa(int(sig))}
}

// Restart stops the container (if it runs) and starts it again, as
// POST /containers/{id}/restart does, with dockerd's "restart" event.
func (m *Manager) Restart(ctx context.Context, ref, signal string, timeout *int) error {
	// As dockerd: an unknown container is said plainly, what goes wrong
	// after with the restart's prefix.
	if _, err := m.lookup(ref); err != nil {
		return err
	}
	if err := m.Stop(ctx, ref, signal, timeout); err != nil && !errdefs.IsNotModified(err) {
		return fmt.Errorf("Cannot restart container %s: %w", ref, err)
	}
	if err := m.Start(ctx, ref); err != nil {
		return fmt.Errorf("Cannot restart container %s: %w", ref, err)
	}
	m.emitRef(ref, events.ActionRestart, nil)
	return nil
}

// execAction is dockerd's exec event action: the prefix, then the command.
func execAction(prefix events.Action, cmd []string) events.Action {
	var args []string
	if len(cmd) > 1 {
		args = cmd[1:]
	}
	return events.Action(string(prefix) + ": " + cmd[0] + " " + strings.Join(args, " "))
}
