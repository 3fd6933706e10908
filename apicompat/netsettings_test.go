package apicompat

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
)

func TestInspectBodyLegacyNetworkFields(t *testing.T) {
	mac := network.HardwareAddr{0x02, 0x42, 10, 123, 0, 2}
	resp := container.InspectResponse{ID: "x", NetworkSettings: &container.NetworkSettings{
		Ports: network.PortMap{},
		Networks: map[string]*network.EndpointSettings{"bridge": {
			IPAddress: netip.MustParseAddr("10.123.0.2"), Gateway: netip.MustParseAddr("10.123.0.1"),
			IPPrefixLen: 16, MacAddress: mac, EndpointID: "ep",
		}},
	}}
	tests := []struct {
		version string
		wantIP  any
	}{
		{"1.50", "10.123.0.2"},
		{"1.52", nil},
	}
	for _, tt := range tests {
		b := inspectJSON(t, tt.version, resp)
		var got struct {
			ID              string `json:"Id"`
			NetworkSettings map[string]any
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		ns := got.NetworkSettings
		if got.ID != "x" || ns["IPAddress"] != tt.wantIP {
			t.Errorf("API %s: Id %q, IPAddress %v; want %v", tt.version, got.ID, ns["IPAddress"], tt.wantIP)
		}
		if tt.wantIP != nil && (ns["Gateway"] != "10.123.0.1" || ns["MacAddress"] != "02:42:0a:7b:00:02" || ns["IPPrefixLen"] != 16.0 || ns["EndpointID"] != "ep") {
			t.Errorf("API %s: legacy fields %v", tt.version, ns)
		}
		if _, ok := ns["Networks"]; !ok {
			t.Errorf("API %s: no Networks", tt.version)
		}
	}
}

// TestInspectBodyLegacyAliases: clients of API 1.44 and older find the
// container's short ID and hostname among a user-defined network's
// Aliases, as dockerd shows them; later clients, and the default
// bridge, do not; the response inspected is left unchanged.
func TestInspectBodyLegacyAliases(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	resp := container.InspectResponse{ID: id, Config: &container.Config{Hostname: "web-host"},
		NetworkSettings: &container.NetworkSettings{Networks: map[string]*network.EndpointSettings{
			"bridge": {},
			"appnet": {Aliases: []string{"web", "0123456789ab"}},
		}}}
	tests := []struct {
		version    string
		wantAppnet []string
	}{
		{"1.41", []string{"web", "0123456789ab", "web-host"}},
		{"1.44", []string{"web", "0123456789ab", "web-host"}},
		{"1.45", []string{"web", "0123456789ab"}},
		{"1.50", []string{"web", "0123456789ab"}},
	}
	for _, tt := range tests {
		b := inspectJSON(t, tt.version, resp)
		var got struct {
			NetworkSettings struct {
				Networks map[string]struct{ Aliases []string }
			}
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		nets := got.NetworkSettings.Networks
		if !slices.Equal(nets["appnet"].Aliases, tt.wantAppnet) || nets["bridge"].Aliases != nil {
			t.Errorf("API %s: appnet aliases %q, bridge %q; want %q and none", tt.version, nets["appnet"].Aliases, nets["bridge"].Aliases, tt.wantAppnet)
		}
	}
	if got := resp.NetworkSettings.Networks["appnet"].Aliases; len(got) != 2 {
		t.Errorf("the inspected response changed: aliases %q", got)
	}
}

// TestLogAttrs: docker logs --details shows the labels and variables the
// log options name, sorted and query-escaped, as dockerd's json-file
// driver records them.
func TestLogAttrs(t *testing.T) {
	ctr := container.InspectResponse{
		Config: &container.Config{Labels: map[string]string{"app": "web", "tier": "x y", "other": "no"},
			Env: []string{"FOO=bar", "PATH=/bin", "SECRET=s"}},
		HostConfig: &container.HostConfig{},
	}
	for _, tc := range []struct {
		opts map[string]string
		want string
	}{
		{nil, ""},
		{map[string]string{"labels": "app,missing"}, "app=web"},
		{map[string]string{"labels": "app", "labels-regex": "^ti", "env": "FOO"}, "FOO=bar,app=web,tier=x+y"},
		{map[string]string{"env-regex": "^(FOO|PATH)$"}, "FOO=bar,PATH=%2Fbin"},
	} {
		ctr.HostConfig.LogConfig.Config = tc.opts
		if got := string(logAttrs(ctr)); got != tc.want {
			t.Errorf("log options %v: %q, want %q", tc.opts, got, tc.want)
		}
	}
}

// inspectJSON is GET /containers/{id}/json's body for resp to a client
// of the API version.
func inspectJSON(t *testing.T, version string, resp container.InspectResponse) []byte {
	t.Helper()
	ctx := context.WithValue(context.Background(), apiVersionKey{}, version)
	b, err := json.Marshal(inspectBody(ctx, resp))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
