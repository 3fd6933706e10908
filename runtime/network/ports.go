package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
)

// portRecord is one published port as bound: what `docker port` shows.
type portRecord struct {
	Port     string // "80/tcp"
	HostIP   netip.Addr
	HostPort uint16
}

// portRequest is one binding to make: HostPort 0 means any free port;
// a range (--publish 8000-8010:80) tries each in turn. A binding that names
// no host address is bound on 0.0.0.0 and, where the host has IPv6, on
// [::] at the same port, as dockerd binds it.
type portRequest struct {
	port     network.Port
	hostIP   netip.Addr
	low, top uint16
	dual     bool
}

// portRequests turns PortBindings and -P into bindings to make, in a
// stable order. With publishAll every exposed port without a binding gets
// a random host port, as dockerd does.
func portRequests(bindings network.PortMap, publishAll bool, exposed network.PortSet) ([]portRequest, error) {
	var out []portRequest
	for port, bs := range bindings {
		if len(bs) == 0 {
			bs = []network.PortBinding{{}}
		}
		for _, b := range bs {
			r := portRequest{port: port, hostIP: b.HostIP.Unmap()}
			if !r.hostIP.IsValid() {
				r.hostIP, r.dual = netip.IPv4Unspecified(), true
			}
			low, top, err := hostPortRange(b.HostPort)
			if err != nil {
				return nil, err
			}
			r.low, r.top = low, top
			out = append(out, r)
		}
	}
	if publishAll {
		for port := range exposed {
			if _, bound := bindings[port]; bound {
				continue
			}
			out = append(out, portRequest{port: port, hostIP: netip.IPv4Unspecified(), dual: true})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].port.Num() != out[j].port.Num() {
			return out[i].port.Num() < out[j].port.Num()
		}
		if out[i].port.Proto() != out[j].port.Proto() {
			return out[i].port.Proto() < out[j].port.Proto()
		}
		return out[i].hostIP.Less(out[j].hostIP)
	})
	return out, nil
}

// hostPortRange parses "", "8080" or "8000-8010".
func hostPortRange(s string) (uint16, uint16, error) {
	if s == "" {
		return 0, 0, nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	low, err := strconv.ParseUint(lo, 10, 16)
	if err != nil {
		return 0, 0, errdefs.ErrInvalidArgument.WithMessage("invalid hostPort: " + s)
	}
	top := low
	if isRange {
		if top, err = strconv.ParseUint(hi, 10, 16); err != nil || top < low {
			return 0, 0, errdefs.ErrInvalidArgument.WithMessage("invalid hostPort: " + s)
		}
	}
	return uint16(low), uint16(top), nil
}

// ValidatePorts checks a create request's bindings.
func ValidatePorts(bindings network.PortMap) error {
	_, err := portRequests(bindings, false, nil)
	return err
}

// openPortsLocked binds every published port of sb and starts its proxy.
// On error the ports already bound stay in sb for the caller to release.
func (m *Manager) openPortsLocked(sb *sandbox, req Request) error {
	reqs, err := portRequests(req.PortBindings, req.PublishAll, req.Exposed)
	if err != nil || len(reqs) == 0 {
		return err
	}
	target, ok := sb.gatewayAddr()
	if !ok {
		// --network none publishes nothing, as in dockerd.
		return nil
	}
	epID := ""
	if len(sb.rec.Endpoints) > 0 {
		epID = sb.rec.Endpoints[0].EndpointID
	}
	for _, r := range reqs {
		px, rec, err := m.bindLocked(r, target)
		if err != nil {
			return errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("driver failed programming external connectivity on endpoint %s (%s): %v", req.Name, epID, err))
		}
		sb.proxies = append(sb.proxies, px)
		sb.rec.Ports = append(sb.rec.Ports, rec)
		if !r.dual {
			continue
		}
		// The IPv6 twin takes the port the IPv4 binding got. A host
		// without IPv6, or with the port taken there, keeps IPv4 alone,
		// as dockerd does.
		rec6 := portRecord{Port: rec.Port, HostIP: netip.IPv6Unspecified(), HostPort: rec.HostPort}
		px6, err := listenProxy(rec6, target, m.log)
		if err != nil {
			m.log.Debug("published on IPv4 only", "container", short(req.ContainerID), "port", rec.Port, "err", err)
			continue
		}
		sb.proxies = append(sb.proxies, px6)
		sb.rec.Ports = append(sb.rec.Ports, rec6)
	}
	return nil
}

// bindLocked binds one request, trying each port of a range.
func (m *Manager) bindLocked(r portRequest, target netip.Addr) (proxy, portRecord, error) {
	var lastErr error
	for p := uint32(r.low); p <= uint32(r.top); p++ {
		rec := portRecord{Port: r.port.String(), HostIP: r.hostIP, HostPort: uint16(p)}
		if p != 0 && m.portTakenLocked(rec) {
			lastErr = fmt.Errorf("Bind for %s failed: port is already allocated", net.JoinHostPort(r.hostIP.String(), strconv.Itoa(int(p))))
			continue
		}
		px, err := listenProxy(rec, target, m.log)
		if err != nil {
			lastErr = err
			continue
		}
		rec.HostPort = px.port()
		return px, rec, nil
	}
	if lastErr == nil {
		lastErr = errors.New("no port to bind")
	}
	return nil, portRecord{}, lastErr
}

// portTakenLocked reports a host port another container has published, so
// the answer is dockerd's "port is already allocated" rather than the
// kernel's "address already in use".
func (m *Manager) portTakenLocked(want portRecord) bool {
	proto := want.Port[strings.IndexByte(want.Port, '/')+1:]
	for _, sb := range m.sandboxes {
		for _, p := range sb.rec.Ports {
			if p.HostPort != want.HostPort || p.Port[strings.IndexByte(p.Port, '/')+1:] != proto {
				continue
			}
			if p.HostIP.Is4() != want.HostIP.Is4() {
				continue // 0.0.0.0 and [::] are bound apart
			}
			if p.HostIP == want.HostIP || p.HostIP.IsUnspecified() || want.HostIP.IsUnspecified() {
				return true
			}
		}
	}
	return false
}

func parseMAC(s string) (network.HardwareAddr, error) {
	hw, err := net.ParseMAC(s)
	return network.HardwareAddr(hw), err
}
