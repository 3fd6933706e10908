package containers

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

func TestGatherDevices(t *testing.T) {
	tmp := t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(tmp, "zero-link")); err != nil {
		t.Fatal(err)
	}
	null := proto.Device{Path: "/dev/null", Major: 1, Minor: 3, Mode: 0o666}
	cases := []struct {
		name    string
		m       container.DeviceMapping
		want    []proto.Device
		wantErr string
		invalid bool
	}{
		{name: "host path", m: container.DeviceMapping{PathOnHost: "/dev/null"}, want: []proto.Device{null}},
		{name: "container path", m: container.DeviceMapping{PathOnHost: "/dev/null", PathInContainer: "/dev/sub/../xnull", CgroupPermissions: "r"},
			want: []proto.Device{{Path: "/dev/xnull", Major: 1, Minor: 3, Mode: 0o666}}},
		{name: "symlink followed", m: container.DeviceMapping{PathOnHost: filepath.Join(tmp, "zero-link"), PathInContainer: "/dev/z"},
			want: []proto.Device{{Path: "/dev/z", Major: 1, Minor: 5, Mode: 0o666}}},
		{name: "missing", m: container.DeviceMapping{PathOnHost: "/nonexistent"},
			wantErr: `error gathering device information while adding custom device "/nonexistent": no such file or directory`},
		{name: "not a device", m: container.DeviceMapping{PathOnHost: "/etc/passwd"},
			wantErr: `error gathering device information while adding custom device "/etc/passwd": not a device node`},
		{name: "outside /dev", m: container.DeviceMapping{PathOnHost: "/dev/null", PathInContainer: "/tmp/null"}, invalid: true,
			wantErr: `error gathering device information while adding custom device "/dev/null": husk makes device nodes only under /dev, not at /tmp/null`},
		{name: "empty directory", m: container.DeviceMapping{PathOnHost: tmp, PathInContainer: "/dev/d"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := gatherDevices([]container.DeviceMapping{c.m})
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr || errdefs.IsInvalidArgument(err) != c.invalid {
					t.Fatalf("error %v (invalid argument: %v), want %q (invalid argument: %v)", err, errdefs.IsInvalidArgument(err), c.wantErr, c.invalid)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("devices %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestGatherDevicesDirectory needs CAP_MKNOD to make the nodes it walks.
func TestGatherDevicesDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mknod(filepath.Join(dir, "c1"), unix.S_IFCHR|0o640, int(unix.Mkdev(1, 7))); err != nil {
		t.Skipf("cannot make device nodes here: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "sub", "c2"), unix.S_IFCHR|0o600, int(unix.Mkdev(10, 229))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := gatherDevices([]container.DeviceMapping{{PathOnHost: dir, PathInContainer: "/dev/d"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []proto.Device{{Path: "/dev/d/c1", Major: 1, Minor: 7, Mode: 0o640}, {Path: "/dev/d/sub/c2", Major: 10, Minor: 229, Mode: 0o600}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("devices %+v, want %+v", got, want)
	}

	// A block device, alone or in a directory, is refused.
	if err := unix.Mknod(filepath.Join(dir, "sub", "b"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
		t.Fatal(err)
	}
	for _, m := range []container.DeviceMapping{{PathOnHost: filepath.Join(dir, "sub", "b")}, {PathOnHost: dir, PathInContainer: "/dev/d"}} {
		if _, err := gatherDevices([]container.DeviceMapping{m}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("block device in %s: %v, want an invalid-argument error", m.PathOnHost, err)
		}
	}
}
