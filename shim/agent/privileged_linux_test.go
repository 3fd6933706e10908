//go:build linux

package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

func TestPrivilegedDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	dev := t.TempDir()
	for _, n := range []struct {
		path         string
		mode         uint32
		major, minor uint32
	}{
		{"kmsg", unix.S_IFCHR | 0o644, 1, 11},
		{"sda", unix.S_IFBLK | 0o660, 8, 0},
		{"net/tun", unix.S_IFCHR | 0o666, 10, 200},
		{"console", unix.S_IFCHR | 0o600, 5, 1}, // the init's own
		{"pts/0", unix.S_IFCHR | 0o620, 136, 0}, // devpts, not devtmpfs
		{"fuse", unix.S_IFCHR | 0o666, 10, 229}, // --device names it too
	} {
		p := filepath.Join(dev, n.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(p, n.mode, int(unix.Mkdev(n.major, n.minor))); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, n.mode&0o7777); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dev, "not-a-device"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/self/fd", filepath.Join(dev, "fd")); err != nil {
		t.Fatal(err)
	}
	explicit := []proto.Device{{Path: "/dev/fuse", Major: 10, Minor: 229, Mode: 0o600}}
	devs, err := privilegedDevices(dev, explicit)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range devs {
		got = append(got, fmt.Sprintf("%s block=%v %d:%d %o", d.Path, d.Block, d.Major, d.Minor, d.Mode))
	}
	want := []string{
		"/dev/kmsg block=false 1:11 644",
		"/dev/net/tun block=false 10:200 666",
		"/dev/sda block=true 8:0 660",
		"/dev/fuse block=false 10:229 600",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("devices:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
