package apicompat

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"

	husknet "github.com/husk-vm/husk/runtime/network"
)

// Networks is what the API needs of the network manager.
type Networks interface {
	Create(ctx context.Context, req network.CreateRequest) (network.CreateResponse, error)
	List(ctx context.Context, filters map[string][]string) ([]network.Summary, error)
	Inspect(ctx context.Context, ref string) (network.Inspect, error)
	Remove(ctx context.Context, ref string) error
	// Prune returns the names of the networks it removed.
	Prune(ctx context.Context, filters map[string][]string) ([]string, error)
	Connect(ctx context.Context, ref string, req network.ConnectRequest) error
	Disconnect(ctx context.Context, ref string, req network.DisconnectRequest) error
}

// initNetworkRoutes registers /networks, in dockerd's order: literal
// paths before the greedy "{name}" ones.
func (s *server) initNetworkRoutes() {
	s.handle(http.MethodGet, "/networks", s.listNetworks)
	s.handle(http.MethodGet, "/networks/", s.listNetworks)
	s.handle(http.MethodGet, "/networks/{name}", s.inspectNetwork)
	s.handle(http.MethodPost, "/networks/create", outlives(s.createNetwork))
	s.handle(http.MethodPost, "/networks/prune", s.pruneNetworks)
	s.handle(http.MethodPost, "/networks/{name}/connect", outlives(s.connectNetwork))
	s.handle(http.MethodPost, "/networks/{name}/disconnect", outlives(s.disconnectNetwork))
	s.handle(http.MethodDelete, "/networks/{name}", outlives(s.removeNetwork))
}

func (s *server) networks() (Networks, error) {
	if s.cfg.Networks == nil {
		return nil, errdefs.ErrNotImplemented.WithMessage("this daemon has no networks")
	}
	return s.cfg.Networks, nil
}

func (s *server) listNetworks(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	n, err := s.networks()
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	filters, err := parseFilters(r)
	if err != nil {
		return err
	}
	list, err := n.List(ctx, filters)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, list)
}

func (s *server) inspectNetwork(ctx context.Context, w http.ResponseWriter, _ *http.Request, vars map[string]string) error {
	n, err := s.networks()
	if err != nil {
		return err
	}
	resp, err := n.Inspect(ctx, vars["name"])
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (s *server) createNetwork(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	n, err := s.networks()
	if err != nil {
		return err
	}
	var req network.CreateRequest
	if err := readNetworkCreate(r, &req); err != nil {
		return err
	}
	// libnetwork's check, made before any other.
	if strings.TrimSpace(req.Name) == "" {
		return errdefs.ErrInvalidArgument.WithMessage("invalid name: name is empty")
	}
	resp, err := n.Create(ctx, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, resp)
}

// readNetworkCreate decodes a network create request. The API types hold
// IPAM addresses as netip values, whose decoding error says nothing a user
// can act on; the addresses are checked first as strings, in dockerd's
// words.
func readNetworkCreate(r *http.Request, req *network.CreateRequest) error {
	var body json.RawMessage
	if err := readJSON(r, &body); err != nil || body == nil {
		return err
	}
	var raw struct {
		EnableIPv6 *bool
		IPAM       *struct{ Config []husknet.IPAMPool }
	}
	if json.Unmarshal(body, &raw) == nil && raw.IPAM != nil {
		if err := husknet.ValidateIPAM(raw.IPAM.Config, raw.EnableIPv6 != nil && *raw.EnableIPv6); err != nil {
			return err
		}
	}
	return decodeJSONBody(bytes.NewReader(body), req)
}

func (s *server) pruneNetworks(ctx context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	n, err := s.networks()
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	filters, err := parseFilters(r)
	if err != nil {
		return err
	}
	removed, err := n.Prune(ctx, filters)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, network.PruneReport{NetworksDeleted: removed})
}

func (s *server) connectNetwork(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	n, err := s.networks()
	if err != nil {
		return err
	}
	var req network.ConnectRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	if err := n.Connect(ctx, vars["name"], req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *server) disconnectNetwork(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	n, err := s.networks()
	if err != nil {
		return err
	}
	var req network.DisconnectRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	if err := n.Disconnect(ctx, vars["name"], req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *server) removeNetwork(ctx context.Context, w http.ResponseWriter, _ *http.Request, vars map[string]string) error {
	n, err := s.networks()
	if err != nil {
		return err
	}
	if err := n.Remove(ctx, vars["name"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
