package network

import (
	"bufio"
	"net/netip"
	"strings"

	"github.com/husk-vm/husk/shim/proto"
)

// defaultHosts is the start of every container's /etc/hosts, as dockerd
// writes it.
const defaultHosts = "127.0.0.1\tlocalhost\n" +
	"::1\tlocalhost ip6-localhost ip6-loopback\n" +
	"fe00::0\tip6-localnet\n" +
	"ff00::0\tip6-mcastprefix\n" +
	"ff02::1\tip6-allnodes\n" +
	"ff02::2\tip6-allrouters\n"

// hostGatewayName is the address of an --add-host entry that stands for
// the host: dockerd's "host-gateway".
const hostGatewayName = "host-gateway"

// hostsFile is a container's /etc/hosts in dockerd's order: the defaults,
// the --add-host entries ("name:ip"), then the container's own address
// with its hostname (none without a network). hostGateway is the address
// "host-gateway" stands for: the default bridge's, as in dockerd.
func hostsFile(hostname, domainname string, own netip.Addr, extra []string, hostGateway netip.Addr) string {
	var b strings.Builder
	b.WriteString(defaultHosts)
	for _, e := range extra {
		// --add-host host:ip; the address may itself hold colons (IPv6).
		name, ip, ok := strings.Cut(e, ":")
		if !ok {
			continue
		}
		if ip == hostGatewayName {
			ip = hostGateway.String()
		}
		b.WriteString(ip + "\t" + name + "\n")
	}
	if own.IsValid() {
		b.WriteString(hostsLine(hostname, domainname, own) + "\n")
	}
	return b.String()
}

// hostsLine is the /etc/hosts line of one of the container's own
// addresses: its FQDN and short hostname.
func hostsLine(hostname, domainname string, addr netip.Addr) string {
	fqdn := hostname
	if domainname != "" {
		fqdn += "." + domainname
	}
	names := fqdn
	if short, _, ok := strings.Cut(fqdn, "."); ok {
		names = fqdn + " " + short
	}
	return addr.String() + "\t" + names
}

// resolvConfig is what a container's /etc/resolv.conf is made of.
type resolvConfig struct {
	Nameservers []string
	Search      []string
	Options     []string
}

// parseResolvConf reads the nameserver, search and options lines of a
// resolv.conf; everything else is dropped, as dockerd does.
func parseResolvConf(content string) resolvConfig {
	var rc resolvConfig
	sc := bufio.NewScanner(strings.NewReader(content))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			rc.Nameservers = append(rc.Nameservers, f[1])
		case "search", "domain":
			rc.Search = f[1:]
		case "options":
			rc.Options = append(rc.Options, f[1:]...)
		}
	}
	return rc
}

func (rc resolvConfig) String() string {
	var b strings.Builder
	if len(rc.Search) > 0 {
		b.WriteString("search " + strings.Join(rc.Search, " ") + "\n")
	}
	for _, ns := range rc.Nameservers {
		b.WriteString("nameserver " + ns + "\n")
	}
	if len(rc.Options) > 0 {
		b.WriteString("options " + strings.Join(rc.Options, " ") + "\n")
	}
	return b.String()
}

// googleDNS is what dockerd falls back to when the host has no nameserver
// a container could reach.
var googleDNS = []string{"8.8.8.8", "8.8.4.4"}

// bridgeResolvConf is the resolv.conf of a container on the default bridge:
// the host's, without loopback nameservers (they would be the guest's own
// loopback), or Google's when none are left; --dns, --dns-search and
// --dns-option replace the corresponding parts.
func bridgeResolvConf(host string, dns, search, options []string) string {
	rc := parseResolvConf(host)
	var kept []string
	for _, ns := range rc.Nameservers {
		a, err := netip.ParseAddr(ns)
		if err != nil || a.IsLoopback() || a.Is6() {
			continue
		}
		kept = append(kept, ns)
	}
	rc.Nameservers = kept
	if len(rc.Nameservers) == 0 {
		rc.Nameservers = googleDNS
	}
	applyDNSFlags(&rc, dns, search, options)
	return rc.String()
}

// embeddedResolvConf is the resolv.conf of a container on a user-defined
// network, as dockerd writes it: the embedded DNS server at 127.0.0.11
// (which the guest sends to huskd's server, Attachment.DNSServer), the
// host's search domains and ndots:0.
func embeddedResolvConf(host string, search, options []string) string {
	rc := parseResolvConf(host)
	rc.Nameservers = []string{proto.EmbeddedDNSAddress}
	rc.Options = []string{"ndots:0"}
	applyDNSFlags(&rc, nil, search, options)
	return rc.String()
}

func applyDNSFlags(rc *resolvConfig, dns, search, options []string) {
	if len(dns) > 0 {
		rc.Nameservers = dns
	}
	if len(search) > 0 {
		rc.Search = search
		if len(search) == 1 && search[0] == "." {
			rc.Search = nil
		}
	}
	if len(options) > 0 {
		rc.Options = options
	}
}
