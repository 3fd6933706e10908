//go:build linux

package agent

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestLinkByMAC(t *testing.T) {
	dir := t.TempDir()
	for _, l := range []struct{ name, mac, index string }{
		{"lo", "00:00:00:00:00:00", "1"},
		{"eth0", "02:42:0a:7b:00:02", "2"},
		{"eth1", "02:42:0A:7B:00:03", "7\n"},
		{"bad0", "02:42:0a:7b:00:04", "x"},
	} {
		d := filepath.Join(dir, l.name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, v := range map[string]string{"address": l.mac + "\n", "ifindex": l.index} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		mac       string
		wantName  string
		wantIndex int
		wantErr   bool
	}{
		{mac: "02:42:0a:7b:00:02", wantName: "eth0", wantIndex: 2},
		{mac: "02:42:0a:7b:00:03", wantName: "eth1", wantIndex: 7},
		{mac: "02:42:0a:7b:00:09"},
		{mac: "02:42:0a:7b:00:04", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.mac, func(t *testing.T) {
			mac, err := net.ParseMAC(tt.mac)
			if err != nil {
				t.Fatal(err)
			}
			l, err := linkByMAC(dir, mac)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantName == "" {
				if l != nil {
					t.Fatalf("found %+v, want none", l.Attrs())
				}
				return
			}
			if l == nil {
				t.Fatal("not found")
			}
			if a := l.Attrs(); a.Name != tt.wantName || a.Index != tt.wantIndex || a.HardwareAddr.String() != tt.mac {
				t.Fatalf("found %s index %d MAC %s, want %s index %d MAC %s", a.Name, a.Index, a.HardwareAddr, tt.wantName, tt.wantIndex, tt.mac)
			}
		})
	}
	if _, err := linkByMAC(filepath.Join(dir, "missing"), nil); err == nil {
		t.Fatal("no error for a missing directory")
	}
}

func TestDisableIPv6(t *testing.T) {
	procSys := t.TempDir()
	if err := disableIPv6(procSys); err != nil {
		t.Fatalf("kernel without IPv6: %v", err)
	}
	for _, scope := range []string{"all", "default"} {
		d := filepath.Join(procSys, "net/ipv6/conf", scope)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "disable_ipv6"), []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := disableIPv6(procSys); err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"all", "default"} {
		b, err := os.ReadFile(filepath.Join(procSys, "net/ipv6/conf", scope, "disable_ipv6"))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != "1" {
			t.Fatalf("%s: disable_ipv6 = %q, want 1", scope, b)
		}
	}
}
