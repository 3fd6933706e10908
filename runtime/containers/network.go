package containers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	husknet "github.com/husk-vm/husk/runtime/network"
)

// Network connects containers' VMs to networks; *husknet.Manager is the
// real one. A Manager without a Network boots VMs with no interface but
// loopback, whatever the container asked for.
type Network interface {
	// Configure checks a new container's network mode and endpoint
	// settings and returns the networks it joins, by name.
	Configure(mode string, endpoints map[string]*network.EndpointSettings) (map[string]*network.EndpointSettings, error)
	// Attach connects a booting container; Detach undoes it once the VM
	// is gone.
	Attach(ctx context.Context, req husknet.Request) (*husknet.Attachment, error)
	Detach(ctx context.Context, containerID string) error
	// Settings are the container's published ports and networks as
	// inspect shows them.
	Settings(containerID string, configured map[string]*network.EndpointSettings, exposed network.PortSet) (network.PortMap, map[string]*network.EndpointSettings)
	// Resolve names a network by ID, name or ID prefix.
	Resolve(ref string) (id, name string, err error)
}

// configureNetwork resolves a create request's networks. Callers own hc.
func (m *Manager) configureNetwork(hc *container.HostConfig, nc *network.NetworkingConfig) (map[string]*network.EndpointSettings, error) {
	if m.net == nil {
		return nil, nil
	}
	if err := husknet.ValidatePorts(hc.PortBindings); err != nil {
		return nil, err
	}
	var eps map[string]*network.EndpointSettings
	if nc != nil {
		eps = nc.EndpointsConfig
	}
	nets, err := m.net.Configure(string(hc.NetworkMode), eps)
	if errdefs.IsNotFound(err) {
		// Not a 404: the CLI would take it for a missing image and pull.
		// dockerd answers a missing network at create the same way.
		return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	return nets, err
}

// attachNetwork connects the container for a boot; nil without a Network.
// Callers hold c.mu.
func (c *ctr) attachNetwork(ctx context.Context, linkHosts []string) (*husknet.Attachment, error) {
	if c.m.net == nil {
		return nil, nil
	}
	cfg, hc := c.rec.Config, c.rec.HostConfig
	return c.m.net.Attach(ctx, husknet.Request{
		ContainerID: c.rec.ID, Name: c.rec.Name, Hostname: cfg.Hostname, Domainname: cfg.Domainname,
		Networks:     c.rec.Networks,
		PortBindings: hc.PortBindings, PublishAll: hc.PublishAllPorts, Exposed: cfg.ExposedPorts,
		DNS: hc.DNS, DNSSearch: hc.DNSSearch, DNSOptions: hc.DNSOptions,
		ExtraHosts: append(slices.Clone(hc.ExtraHosts), linkHosts...),
	})
}

// detachNetwork releases what attachNetwork took.
func (c *ctr) detachNetwork(ctx context.Context) {
	if c.m.net == nil {
		return
	}
	if err := c.m.net.Detach(ctx, c.rec.ID); err != nil {
		c.m.log.Warn("detach network", "id", c.rec.ID[:12], "err", err)
	}
}

// networkSettings is NetworkSettings for inspect. Callers hold c.mu.
func (c *ctr) networkSettings() *container.NetworkSettings {
	ns := &container.NetworkSettings{Ports: network.PortMap{}, Networks: map[string]*network.EndpointSettings{}}
	if c.m.net == nil {
		return ns
	}
	ns.Ports, ns.Networks = c.m.net.Settings(c.rec.ID, c.rec.Networks, c.rec.Config.ExposedPorts)
	return ns
}

// portSummaries is the Ports of `docker ps`: every exposed port, with
// its binding when published, sorted as dockerd sorts them.
func portSummaries(ports network.PortMap) []container.PortSummary {
	out := []container.PortSummary{}
	for p, bindings := range ports {
		if len(bindings) == 0 {
			out = append(out, container.PortSummary{PrivatePort: p.Num(), Type: string(p.Proto())})
			continue
		}
		for _, b := range bindings {
			pub, _ := strconv.ParseUint(b.HostPort, 10, 16)
			out = append(out, container.PortSummary{IP: b.HostIP, PrivatePort: p.Num(), PublicPort: uint16(pub), Type: string(p.Proto())})
		}
	}
	// Stable: a port's bindings keep their order, 0.0.0.0 before [::].
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].PrivatePort != out[j].PrivatePort {
			return out[i].PrivatePort < out[j].PrivatePort
		}
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		return out[i].PublicPort < out[j].PublicPort
	})
	return out
}

// IsRunning reports whether the container with this full ID has a VM:
// the network manager keeps the connections of such containers when the
// daemon starts again.
func (m *Manager) IsRunning(id string) bool {
	m.mu.Lock()
	c, ok := m.byID[id]
	m.mu.Unlock()
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run != nil
}

// Connect adds a network to a container. A running container's VM gets a
// NIC by hot-plug (hotplug.go); any other gets it at its next boot.
func (m *Manager) Connect(ctx context.Context, ref, netRef string, cfg *network.EndpointSettings) error {
	if m.net == nil {
		return errdefs.ErrNotImplemented.WithMessage("this daemon has no networks")
	}
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	_, name, err := m.net.Resolve(netRef)
	if err != nil {
		return err
	}
	eps, err := m.net.Configure(name, map[string]*network.EndpointSettings{name: cfg})
	var invalid husknet.EndpointErrors
	if errors.As(err, &invalid) && len(invalid) == 1 {
		// dockerd's connect reports the settings without naming the
		// network, as create does.
		return errdefs.ErrInvalidArgument.WithMessage(invalid[0].Err.Error())
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.rec.Networks[name]; ok {
		return errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("endpoint with name %s already exists in network %s", c.rec.Name, name))
	}
	if _, none := c.rec.Networks[husknet.NoneName]; none || name == husknet.NoneName && len(c.rec.Networks) > 0 {
		return errdefs.ErrInvalidArgument.WithMessage("container cannot be connected to multiple networks with one of the networks in private (none) mode")
	}
	if c.run != nil {
		return c.connectRunning(ctx, name, eps[name])
	}
	c.addNetworkLocked(name, eps[name])
	return c.save()
}

// Disconnect removes a network from a container; a running container's
// VM loses the NIC (hotplug.go).
func (m *Manager) Disconnect(ctx context.Context, ref, netRef string, force bool) error {
	if m.net == nil {
		return errdefs.ErrNotImplemented.WithMessage("this daemon has no networks")
	}
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	_, name, err := m.net.Resolve(netRef)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.rec.Networks[name]; !ok {
		return errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("container %s is not connected to network %s", c.rec.ID, name))
	}
	if c.run != nil {
		return c.disconnectRunning(ctx, name)
	}
	delete(c.rec.Networks, name)
	return c.save()
}
