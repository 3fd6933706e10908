package network

import (
	"net/netip"
	"testing"
)

func TestHostsFile(t *testing.T) {
	tests := []struct {
		name             string
		hostname, domain string
		own              string
		extra            []string
		want             string
	}{{
		name: "no network", hostname: "abc",
		want: defaultHosts,
	}, {
		name: "bridge", hostname: "abc", own: "10.123.0.2",
		want: defaultHosts + "10.123.0.2\tabc\n",
	}, {
		name: "fqdn and add-host", hostname: "web", domain: "example.test", own: "10.123.0.3",
		extra: []string{"db:10.0.0.9", "v6:fd00::1"},
		want:  defaultHosts + "10.0.0.9\tdb\nfd00::1\tv6\n10.123.0.3\tweb.example.test web\n",
	}, {
		// host-gateway is the default bridge's address whatever the
		// container's network; a link's names share one line.
		name: "host-gateway and a link", hostname: "app", own: "10.200.0.5",
		extra: []string{"host.docker.internal:host-gateway", "db 0123456789ab db-1:10.123.0.7"},
		want:  defaultHosts + "10.123.0.1\thost.docker.internal\n10.123.0.7\tdb 0123456789ab db-1\n10.200.0.5\tapp\n",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var own netip.Addr
			if tt.own != "" {
				own = netip.MustParseAddr(tt.own)
			}
			if got := hostsFile(tt.hostname, tt.domain, own, tt.extra, netip.MustParseAddr("10.123.0.1")); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestResolvConf(t *testing.T) {
	host := "# generated\nnameserver 127.0.0.53\nnameserver 10.255.255.53\nnameserver fd00::53\nsearch corp.test\noptions edns0\n"
	tests := []struct {
		name string
		got  string
		want string
	}{{
		name: "bridge keeps reachable IPv4 servers",
		got:  bridgeResolvConf(host, nil, nil, nil),
		want: "search corp.test\nnameserver 10.255.255.53\noptions edns0\n",
	}, {
		name: "bridge falls back to Google",
		got:  bridgeResolvConf("nameserver 127.0.0.1\n", nil, nil, nil),
		want: "nameserver 8.8.8.8\nnameserver 8.8.4.4\n",
	}, {
		name: "bridge with --dns and --dns-search",
		got:  bridgeResolvConf(host, []string{"10.9.9.9"}, []string{"a.test", "b.test"}, nil),
		want: "search a.test b.test\nnameserver 10.9.9.9\noptions edns0\n",
	}, {
		name: "user network",
		got:  embeddedResolvConf(host, nil, nil),
		want: "search corp.test\nnameserver 127.0.0.11\noptions ndots:0\n",
	}}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got\n%q\nwant\n%q", tt.name, tt.got, tt.want)
		}
	}
}
