package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

func TestCheckGuestDevices(t *testing.T) {
	proc := t.TempDir()
	devices := "Character devices:\n  1 mem\n  5 /dev/tty\n 10 misc\n\nBlock devices:\n  8 sd\n259 blkext\n"
	if err := os.WriteFile(filepath.Join(proc, "devices"), []byte(devices), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "misc"), []byte("229 fuse\n 62 ptp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name         string
		major, minor uint32
		ok           bool
	}{
		{"null", 1, 3, true},
		{"tty", 5, 0, true},
		{"misc device the guest has (fuse)", 10, 229, true},
		{"misc device it lacks (tun)", 10, 200, false},
		{"a block major is no character major", 8, 0, false},
		{"hardware only the host has", 188, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkGuestDevices(proc, []proto.Device{{Path: "/dev/x", Major: c.major, Minor: c.minor}})
			if (err == nil) != c.ok {
				t.Fatalf("check %d:%d: %v, want ok=%v", c.major, c.minor, err, c.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "the guest kernel has no driver") {
				t.Errorf("error %q does not say why", err)
			}
		})
	}
	if err := checkGuestDevices(filepath.Join(proc, "missing"), nil); err != nil {
		t.Errorf("no devices must need no /proc: %v", err)
	}
}
