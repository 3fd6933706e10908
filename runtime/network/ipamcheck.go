package network

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
)

// IPAMPool is one IPAM pool as a client sent it, before its addresses are
// parsed: a bad address is reported in the words of the field it came in.
type IPAMPool struct {
	Subnet, IPRange, Gateway string
	AuxAddress               map[string]string `json:"AuxiliaryAddresses"`
}

// PoolsOf gives decoded pools back as strings, for ValidateIPAM.
func PoolsOf(ipam *network.IPAM) []IPAMPool {
	if ipam == nil {
		return nil
	}
	str := func(v interface {
		IsValid() bool
		String() string
	}) string {
		if !v.IsValid() {
			return ""
		}
		return v.String()
	}
	pools := make([]IPAMPool, len(ipam.Config))
	for i, c := range ipam.Config {
		pools[i] = IPAMPool{Subnet: str(c.Subnet), IPRange: str(c.IPRange), Gateway: str(c.Gateway)}
		for name, a := range c.AuxAddress {
			if pools[i].AuxAddress == nil {
				pools[i].AuxAddress = map[string]string{}
			}
			pools[i].AuxAddress[name] = str(a)
		}
	}
	return pools
}

// ValidateIPAM checks a network's pools as dockerd (v25 and later)
// checks them before its IPAM sees them, and reports every problem
// together, in its words. An IPv6 pool is left alone unless IPv6 is
// enabled, as dockerd leaves it. The error is an invalid-argument one.
func ValidateIPAM(pools []IPAMPool, enableIPv6 bool) error {
	var errs []error
	for _, cfg := range pools {
		subnet, err := netip.ParsePrefix(cfg.Subnet)
		if err != nil {
			errs = append(errs, fmt.Errorf("invalid subnet %s: invalid CIDR block notation", cfg.Subnet))
			continue
		}
		if subnet.Addr().Is6() && !enableIPv6 {
			continue
		}
		if subnet != subnet.Masked() {
			errs = append(errs, fmt.Errorf("invalid subnet %s: it should be %s", subnet, subnet.Masked()))
		}
		errs = append(errs, checkIPRange(cfg.IPRange, subnet)...)
		if err := checkPoolAddress(cfg.Gateway, subnet); err != nil {
			errs = append(errs, fmt.Errorf("invalid gateway %s: %w", cfg.Gateway, err))
		}
		// dockerd walks a map; sorted, the list reads the same each time.
		for _, name := range slices.Sorted(maps.Keys(cfg.AuxAddress)) {
			if err := checkPoolAddress(cfg.AuxAddress[name], subnet); err != nil {
				errs = append(errs, fmt.Errorf("invalid auxiliary address %s: %w", name, err))
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errdefs.ErrInvalidArgument.WithMessage("invalid network config:\n" + joinErrors(errs))
}

func checkIPRange(ipRange string, subnet netip.Prefix) []error {
	if ipRange == "" {
		return nil
	}
	r, err := netip.ParsePrefix(ipRange)
	if err != nil {
		return []error{fmt.Errorf("invalid ip-range %s: invalid CIDR block notation", ipRange)}
	}
	if r.Addr().Is4() != subnet.Addr().Is4() {
		return []error{fmt.Errorf("invalid ip-range %s: parent subnet is an %s block", ipRange, family(subnet.Addr()))}
	}
	var errs []error
	if r.Bits() < subnet.Bits() {
		errs = append(errs, fmt.Errorf("invalid ip-range %s: CIDR block is bigger than its parent subnet %s", ipRange, subnet))
	}
	if r != r.Masked() {
		errs = append(errs, fmt.Errorf("invalid ip-range %s: it should be %s", r, r.Masked()))
	}
	if !subnet.Overlaps(r) {
		errs = append(errs, fmt.Errorf("invalid ip-range %s: parent subnet %s doesn't contain ip-range", ipRange, subnet))
	}
	return errs
}

func checkPoolAddress(address string, subnet netip.Prefix) error {
	if address == "" {
		return nil
	}
	a, err := netip.ParseAddr(address)
	if err != nil {
		return errors.New("invalid address")
	}
	if a.Is4() != subnet.Addr().Is4() {
		return fmt.Errorf("parent subnet is an %s block", family(subnet.Addr()))
	}
	if !subnet.Contains(a) {
		return fmt.Errorf("parent subnet %s doesn't contain this address", subnet)
	}
	return nil
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}
