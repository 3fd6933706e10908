package network

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// tableName is husk's nftables table; everything husk adds lives in it, so
// removing it removes every rule husk made.
const tableName = "husk"

// bridgePrefix begins the name of every bridge husk makes: "husk0" for the
// default network, "husk-<id>" for the others. The isolation rules match
// on it.
const bridgePrefix = "husk"

// fwNetwork is what the rules need to know of one network.
type fwNetwork struct {
	Bridge   string
	Subnet   netip.Prefix
	Internal bool
}

// firewall programs the rules; tests fake it.
type firewall interface {
	// apply replaces husk's table with rules for nets. nat adds egress
	// masquerading for the networks that are not internal.
	apply(nets []fwNetwork, nat bool) error
	// remove deletes husk's table.
	remove() error
}

// nftFirewall is firewall over nf_tables in the daemon's network
// namespace, through github.com/google/nftables (no nft binary needed).
type nftFirewall struct {
	// netnsFd, when non-zero, programs that namespace instead (tests).
	netnsFd int
}

func (f nftFirewall) conn() (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if f.netnsFd != 0 {
		opts = append(opts, nftables.WithNetNSFd(f.netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return c, nil
}

// dropExisting queues the deletion of husk's table when it exists: a
// deletion of a missing table would fail the whole batch.
func dropExisting(c *nftables.Conn) error {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return fmt.Errorf("list nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == tableName {
			c.DelTable(t)
		}
	}
	return nil
}

func (f nftFirewall) remove() error {
	c, err := f.conn()
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	if err := dropExisting(c); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("remove nftables table %s: %w", tableName, err)
	}
	return nil
}

func (f nftFirewall) apply(nets []fwNetwork, nat bool) error {
	c, err := f.conn()
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	if err := dropExisting(c); err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: tableName})
	accept := nftables.ChainPolicyAccept
	fwd := c.AddChain(&nftables.Chain{
		Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	for _, r := range isolationRules(nets) {
		c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: r})
	}
	if nat {
		post := c.AddChain(&nftables.Chain{
			Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
		})
		for _, r := range masqueradeRules(nets) {
			c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: r})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("program nftables table %s: %w", tableName, err)
	}
	return nil
}

// isolationRules keep networks apart, as dockerd's DOCKER-ISOLATION
// chains do: nothing is forwarded from one husk bridge to another, and an
// internal network's bridge forwards nothing at all.
//
//	iifname B oifname "husk*" oifname != B drop   (every network)
//	iifname B oifname != B drop                   (internal)
//	oifname B iifname != B drop                   (internal)
func isolationRules(nets []fwNetwork) [][]expr.Any {
	var out [][]expr.Any
	for _, n := range nets {
		if n.Internal {
			out = append(out,
				concat(ifname(unix.NFT_META_IIFNAME, expr.CmpOpEq, n.Bridge), ifname(unix.NFT_META_OIFNAME, expr.CmpOpNeq, n.Bridge), drop()),
				concat(ifname(unix.NFT_META_OIFNAME, expr.CmpOpEq, n.Bridge), ifname(unix.NFT_META_IIFNAME, expr.CmpOpNeq, n.Bridge), drop()))
			continue
		}
		out = append(out, concat(
			ifname(unix.NFT_META_IIFNAME, expr.CmpOpEq, n.Bridge),
			ifnamePrefix(unix.NFT_META_OIFNAME, bridgePrefix),
			ifname(unix.NFT_META_OIFNAME, expr.CmpOpNeq, n.Bridge),
			drop()))
	}
	return out
}

// masqueradeRules NAT what leaves a network for anywhere but its own
// bridge:
//
//	ip saddr SUBNET oifname != B masquerade
func masqueradeRules(nets []fwNetwork) [][]expr.Any {
	var out [][]expr.Any
	for _, n := range nets {
		if n.Internal {
			continue
		}
		out = append(out, concat(saddrIn(n.Subnet), ifname(unix.NFT_META_OIFNAME, expr.CmpOpNeq, n.Bridge), []expr.Any{&expr.Masq{}}))
	}
	return out
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ifname compares an interface name exactly: the name and its NUL.
func ifname(key expr.MetaKey, op expr.CmpOp, name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: append([]byte(name), 0)},
	}
}

// ifnamePrefix matches names that begin with prefix: cmp compares only as
// many bytes as it is given, which is how nft spells "husk*".
func ifnamePrefix(key expr.MetaKey, prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(prefix)},
	}
}

func saddrIn(p netip.Prefix) []expr.Any {
	m := make([]byte, 4)
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	net := p.Masked().Addr().As4()
	return []expr.Any{
		// ip saddr: 4 bytes at offset 12 of the network header.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: m, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: net[:]},
	}
}

func drop() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}} }
