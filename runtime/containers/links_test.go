package containers

import (
	"slices"
	"testing"

	"github.com/moby/moby/api/types/network"
)

func TestParseLinks(t *testing.T) {
	got := parseLinks([]string{"db:database", "/cache", "web:/me/front"})
	want := []link{{name: "db", alias: "database"}, {name: "cache", alias: "cache"}, {name: "web", alias: "front"}}
	if !slices.Equal(got, want) {
		t.Errorf("links %v, want %v", got, want)
	}
}

func TestLinkEnv(t *testing.T) {
	exposed := network.PortSet{}
	for _, p := range []string{"8080/tcp", "53/udp", "80/tcp"} {
		exposed[network.MustParsePort(p)] = struct{}{}
	}
	got := linkEnv("web", "my-db", "10.123.0.5", exposed, []string{"PATH=/bin", "HOME=/root", "FOO=bar=baz", "EMPTY="})
	want := []string{
		"MY_DB_NAME=/web/my-db",
		"MY_DB_PORT=udp://10.123.0.5:53",
		"MY_DB_PORT_53_UDP=udp://10.123.0.5:53", "MY_DB_PORT_53_UDP_ADDR=10.123.0.5", "MY_DB_PORT_53_UDP_PORT=53", "MY_DB_PORT_53_UDP_PROTO=udp",
		"MY_DB_PORT_80_TCP=tcp://10.123.0.5:80", "MY_DB_PORT_80_TCP_ADDR=10.123.0.5", "MY_DB_PORT_80_TCP_PORT=80", "MY_DB_PORT_80_TCP_PROTO=tcp",
		"MY_DB_PORT_8080_TCP=tcp://10.123.0.5:8080", "MY_DB_PORT_8080_TCP_ADDR=10.123.0.5", "MY_DB_PORT_8080_TCP_PORT=8080", "MY_DB_PORT_8080_TCP_PROTO=tcp",
		"MY_DB_ENV_FOO=bar=baz", "MY_DB_ENV_EMPTY=",
	}
	if !slices.Equal(got, want) {
		t.Errorf("env\n%q\nwant\n%q", got, want)
	}
}
