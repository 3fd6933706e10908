package network

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/containerd/errdefs"
)

// pool hands out the IPv4 addresses of one subnet. It holds no state of its
// own on disk: the endpoints that hold addresses are persisted, and a pool
// is rebuilt from them at start, so an address is never handed out twice
// while an endpoint record still claims it.
type pool struct {
	subnet  netip.Prefix
	gateway netip.Addr
	// first and last bound what allocate hands out: the subnet's
	// addresses, or those of its --ip-range.
	first, last netip.Addr
	used        map[netip.Addr]string // address → owner (container ID)
}

// newPool makes the pool of a subnet; a valid ipRange (inside the subnet)
// narrows what allocate hands out to it, as libnetwork's IPAM hands out a
// range: from its first address, unless that is the subnet's own.
func newPool(subnet netip.Prefix, gateway netip.Addr, ipRange netip.Prefix) (*pool, error) {
	subnet = subnet.Masked()
	if !subnet.Addr().Is4() {
		return nil, errdefs.ErrInvalidArgument.WithMessage("only IPv4 subnets are supported: " + subnet.String())
	}
	if subnet.Bits() > 30 {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("subnet %s is too small: it needs room for a gateway and a container", subnet))
	}
	if !subnet.Contains(gateway) || gateway == subnet.Addr() || gateway == lastAddr(subnet) {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("no matching subnet for gateway %s", gateway))
	}
	p := &pool{subnet: subnet, gateway: gateway, first: subnet.Addr().Next(), last: lastAddr(subnet).Prev(), used: map[netip.Addr]string{}}
	if ipRange.IsValid() {
		if ipRange = ipRange.Masked(); ipRange.Bits() < subnet.Bits() || !subnet.Contains(ipRange.Addr()) {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("no matching subnet for range %s", ipRange))
		}
		p.first = firstInRange(subnet, ipRange)
		if l := lastAddr(ipRange); l.Less(p.last) {
			p.last = l
		}
	}
	return p, nil
}

// allocate gives owner the lowest free address, as libnetwork's default
// IPAM does, so the first container on a fresh bridge is always .2.
func (p *pool) allocate(owner string) (netip.Addr, error) {
	for a := p.first; a.IsValid() && !p.last.Less(a); a = a.Next() {
		if a == p.gateway {
			continue
		}
		if _, taken := p.used[a]; !taken {
			p.used[a] = owner
			return a, nil
		}
	}
	return netip.Addr{}, errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("no available IPv4 addresses on this network's address pools: %s", p.subnet))
}

// claim gives owner a chosen address (a static --ip, or one read back from
// disk).
func (p *pool) claim(a netip.Addr, owner string) error {
	if !p.subnet.Contains(a) || a == p.subnet.Addr() || a == lastAddr(p.subnet) {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Address %s does not belong to subnet %s", a, p.subnet))
	}
	// libnetwork's ErrIPAlreadyAllocated: a 403, without the address.
	if a == p.gateway {
		return errdefs.ErrPermissionDenied.WithMessage("Address already in use")
	}
	if o, taken := p.used[a]; taken && o != owner {
		return errdefs.ErrPermissionDenied.WithMessage("Address already in use")
	}
	p.used[a] = owner
	return nil
}

// firstInRange is the first address of ipRange (or of the subnet, when
// there is no range) a container or gateway may have: the subnet's own
// address is never handed out.
func firstInRange(subnet, ipRange netip.Prefix) netip.Addr {
	if a := ipRange.Masked().Addr(); ipRange.IsValid() && a != subnet.Masked().Addr() {
		return a
	}
	return subnet.Masked().Addr().Next()
}

// release frees a when owner holds it.
func (p *pool) release(a netip.Addr, owner string) {
	if p.used[a] == owner {
		delete(p.used, a)
	}
}

func (p *pool) inUse() int { return len(p.used) }

// lastAddr is the broadcast address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	hostBits := 32 - p.Bits()
	for i := 3; i >= 0 && hostBits > 0; i-- {
		n := min(hostBits, 8)
		b[i] |= byte(1<<n - 1)
		hostBits -= n
	}
	return netip.AddrFrom4(b)
}

// macFor derives a container's MAC from its address as dockerd does
// (02:42 and the four address bytes): locally administered, unique on the
// bridge because the address is, and stable across daemon restarts.
func macFor(a netip.Addr) net.HardwareAddr {
	b := a.As4()
	return net.HardwareAddr{0x02, 0x42, b[0], b[1], b[2], b[3]}
}
