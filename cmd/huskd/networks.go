package main

import (
	"context"

	"github.com/moby/moby/api/types/network"

	"github.com/husk-vm/husk/runtime/containers"
	husknet "github.com/husk-vm/husk/runtime/network"
)

// networkAPI is the network manager as the API sees it: connect and
// disconnect change container records, which the container manager owns.
type networkAPI struct {
	*husknet.Manager
	containers *containers.Manager
}

func (a networkAPI) Connect(ctx context.Context, ref string, req network.ConnectRequest) error {
	return a.containers.Connect(ctx, req.Container, ref, req.EndpointConfig)
}

func (a networkAPI) Disconnect(ctx context.Context, ref string, req network.DisconnectRequest) error {
	return a.containers.Disconnect(ctx, req.Container, ref, req.Force)
}
