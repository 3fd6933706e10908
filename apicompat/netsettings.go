package apicompat

import (
	"context"
	"slices"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
)

// legacyNetworkSettings is NetworkSettings as dockerd shows it to clients
// of API 1.51 and older: besides Ports and Networks, the default bridge
// endpoint's address, gateway and MAC at the top level, which scripts
// read as {{.NetworkSettings.IPAddress}}. The moby types dropped these
// fields with API 1.52, so the API layer adds them back here from the
// "bridge" entry of Networks.
type legacyNetworkSettings struct {
	Bridge                 string
	SandboxID              string
	SandboxKey             string
	Ports                  network.PortMap
	HairpinMode            bool
	LinkLocalIPv6Address   string
	LinkLocalIPv6PrefixLen int
	SecondaryIPAddresses   []any
	SecondaryIPv6Addresses []any
	EndpointID             string
	Gateway                string
	GlobalIPv6Address      string
	GlobalIPv6PrefixLen    int
	IPAddress              string
	IPPrefixLen            int
	IPv6Gateway            string
	MacAddress             string
	Networks               map[string]*network.EndpointSettings
}

// inspectBody is GET /containers/{id}/json's answer for the client's API
// version.
func inspectBody(ctx context.Context, resp container.InspectResponse) any {
	if resp.NetworkSettings != nil && versionLess(apiVersion(ctx), "1.45") {
		resp.NetworkSettings = legacyAliases(resp)
	}
	if resp.NetworkSettings == nil || !versionLess(apiVersion(ctx), "1.52") {
		return resp
	}
	ns := resp.NetworkSettings
	legacy := &legacyNetworkSettings{SandboxID: ns.SandboxID, SandboxKey: ns.SandboxKey, Ports: ns.Ports, Networks: ns.Networks}
	if ep := ns.Networks[network.NetworkBridge]; ep != nil {
		legacy.EndpointID = ep.EndpointID
		legacy.IPPrefixLen = ep.IPPrefixLen
		legacy.GlobalIPv6PrefixLen = ep.GlobalIPv6PrefixLen
		if ep.Gateway.IsValid() {
			legacy.Gateway = ep.Gateway.String()
		}
		if ep.IPAddress.IsValid() {
			legacy.IPAddress = ep.IPAddress.String()
		}
		if ep.IPv6Gateway.IsValid() {
			legacy.IPv6Gateway = ep.IPv6Gateway.String()
		}
		if ep.GlobalIPv6Address.IsValid() {
			legacy.GlobalIPv6Address = ep.GlobalIPv6Address.String()
		}
		if len(ep.MacAddress) > 0 {
			legacy.MacAddress = ep.MacAddress.String()
		}
	}
	return struct {
		container.InspectResponse
		NetworkSettings *legacyNetworkSettings
	}{resp, legacy}
}

// legacyAliases is resp's NetworkSettings as dockerd shows it to clients
// of API 1.44 and older: each user-defined network's Aliases hold the
// container's short ID and hostname too, by which its DNS answers. API
// 1.45 moved them to DNSNames, and clients of that era (Compose v1,
// older SDKs) read them from Aliases. resp's own settings are left as
// they are: they may be the daemon's.
func legacyAliases(resp container.InspectResponse) *container.NetworkSettings {
	ns := *resp.NetworkSettings
	ns.Networks = make(map[string]*network.EndpointSettings, len(resp.NetworkSettings.Networks))
	var hostname string
	if resp.Config != nil {
		hostname = resp.Config.Hostname
	}
	shortID := resp.ID
	if len(shortID) > 12 {
		shortID = shortID[:12]
	}
	for name, ep := range resp.NetworkSettings.Networks {
		if ep != nil && container.NetworkMode(name).IsUserDefined() {
			ep = ep.Copy()
			for _, alias := range []string{shortID, hostname} {
				if alias != "" && !slices.Contains(ep.Aliases, alias) {
					ep.Aliases = append(ep.Aliases, alias)
				}
			}
		}
		ns.Networks[name] = ep
	}
	return &ns
}
