package containers

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
)

func TestParseBind(t *testing.T) {
	tests := []struct {
		raw     string
		want    Mount
		wantErr string
	}{
		{raw: "/host:/ctr", want: Mount{MountPoint: container.MountPoint{Type: "bind", Source: "/host", Destination: "/ctr", RW: true, Propagation: "rprivate"}, CreateSource: true}},
		{raw: "/host/:/ctr/:ro", want: Mount{MountPoint: container.MountPoint{Type: "bind", Source: "/host", Destination: "/ctr", Mode: "ro", Propagation: "rprivate"}, CreateSource: true}},
		{raw: "/h:/c:rw,rshared", want: Mount{MountPoint: container.MountPoint{Type: "bind", Source: "/h", Destination: "/c", Mode: "rw,rshared", RW: true, Propagation: "rshared"}, CreateSource: true}},
		{raw: "data:/data", want: Mount{MountPoint: container.MountPoint{Type: "volume", Name: "data", Destination: "/data", Driver: "local", Mode: "z", RW: true}, CopyUp: true}},
		{raw: "data:/data:ro,nocopy", want: Mount{MountPoint: container.MountPoint{Type: "volume", Name: "data", Destination: "/data", Driver: "local", Mode: "ro,nocopy"}}},
		{raw: "/anon", want: Mount{MountPoint: container.MountPoint{Type: "volume", Destination: "/anon", Driver: "local", RW: true}, Anonymous: true, CopyUp: true}},
		{raw: "v1:relative", wantErr: `invalid volume specification: 'v1:relative': invalid mount config for type "volume": invalid mount path: 'relative' mount path must be absolute`},
		{raw: "v1:/", wantErr: `invalid volume specification: 'v1:/': invalid mount config for type "volume": invalid specification: destination can't be '/'`},
		{raw: "/h:/x:bogus", wantErr: "invalid mode: bogus"},
		{raw: "/h:/x:ro,rw", wantErr: "invalid mode: ro,rw"},
		{raw: "/foo:rw", wantErr: "invalid volume specification: '/foo:rw'"},
		{raw: ":/x", wantErr: "invalid volume specification: ':/x'"},
		{raw: "a:b:c:d", wantErr: "invalid volume specification: 'a:b:c:d'"},
	}
	for _, tt := range tests {
		got, err := parseBind(tt.raw)
		if tt.wantErr != "" {
			if !errdefs.IsInvalidArgument(err) || err.Error() != tt.wantErr {
				t.Errorf("%q: err %v, want %q", tt.raw, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q:\n got %+v, %v\nwant %+v", tt.raw, got, err, tt.want)
		}
	}
}

func TestParseMountSpec(t *testing.T) {
	exists := func(p string) bool { return p == "/there" }
	tests := []struct {
		spec    mount.Mount
		want    Mount
		wantErr string
	}{
		{spec: mount.Mount{Type: "bind", Source: "/there", Target: "/x", ReadOnly: true},
			want: Mount{MountPoint: container.MountPoint{Type: "bind", Source: "/there", Destination: "/x", Propagation: "rprivate"}}},
		{spec: mount.Mount{Type: "bind", Source: "/nonexist", Target: "/x"},
			wantErr: `invalid mount config for type "bind": bind source path does not exist: /nonexist`},
		{spec: mount.Mount{Type: "bind", Source: "/nonexist", Target: "/x", BindOptions: &mount.BindOptions{CreateMountpoint: true}},
			want: Mount{MountPoint: container.MountPoint{Type: "bind", Source: "/nonexist", Destination: "/x", RW: true, Propagation: "rprivate"}, CreateSource: true}},
		{spec: mount.Mount{Type: "volume", Source: "v", Target: "/x", VolumeOptions: &mount.VolumeOptions{NoCopy: true}},
			want: Mount{MountPoint: container.MountPoint{Type: "volume", Name: "v", Destination: "/x", Driver: "local", RW: true}}},
		{spec: mount.Mount{Type: "volume", Target: "/x", ReadOnly: true},
			wantErr: `invalid mount config for type "volume": must not set ReadOnly mode when using anonymous volumes`},
		{spec: mount.Mount{Type: "volume", Source: "v", Target: "/x", VolumeOptions: &mount.VolumeOptions{Subpath: "a/b"}},
			want: Mount{MountPoint: container.MountPoint{Type: "volume", Name: "v", Destination: "/x", Driver: "local", RW: true}, CopyUp: true, Subpath: "a/b"}},
		{spec: mount.Mount{Type: "volume", Source: "v", Target: "/x", VolumeOptions: &mount.VolumeOptions{Subpath: "../up"}},
			wantErr: `invalid mount config for type "volume": subpath must be a relative path within the volume`},
		{spec: mount.Mount{Type: "volume", Target: "/x", VolumeOptions: &mount.VolumeOptions{Subpath: "a"}},
			wantErr: `invalid mount config for type "volume": must not set Subpath when using anonymous volumes`},
		{spec: mount.Mount{Type: "tmpfs", Target: "/t", TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 1 << 20, Mode: 0o1770}},
			want: Mount{MountPoint: container.MountPoint{Type: "tmpfs", Destination: "/t", RW: true}, Options: []string{"noexec", "nosuid", "nodev", "mode=1770", "size=1m"}}},
		{spec: mount.Mount{Type: "tmpfs", Source: "foo", Target: "/x"},
			wantErr: `invalid mount config for type "tmpfs": field Source must not be specified`},
		{spec: mount.Mount{Type: "tmpfs"}, wantErr: `invalid mount config for type "tmpfs": field Target must not be empty`},
		{spec: mount.Mount{Type: "npipe", Source: "x", Target: "/x"}, wantErr: `invalid mount config for type "npipe": mount type unknown`},
	}
	for _, tt := range tests {
		got, err := parseMountSpec(tt.spec, exists)
		if tt.wantErr != "" {
			if !errdefs.IsInvalidArgument(err) || err.Error() != tt.wantErr {
				t.Errorf("%+v: err %v, want %q", tt.spec, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.MountPoint != tt.want.MountPoint || !slices.Equal(got.Options, tt.want.Options) ||
			got.CreateSource != tt.want.CreateSource || got.CopyUp != tt.want.CopyUp || got.Anonymous != tt.want.Anonymous || got.Subpath != tt.want.Subpath {
			t.Errorf("%+v:\n got %+v, %v\nwant %+v", tt.spec, got, err, tt.want)
		}
	}
}

func TestPlanMounts(t *testing.T) {
	cfg := &container.Config{Volumes: map[string]struct{}{"/data": {}, "/cache": {}}}
	hc := &container.HostConfig{
		Binds:  []string{"/h/sub:/data/sub:ro", "named:/data"},
		Mounts: []mount.Mount{{Type: "tmpfs", Target: "/t"}},
		Tmpfs:  map[string]string{"/run": "size=2m"},
	}
	got, err := planMounts(cfg, hc, nil, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	var dests []string
	for _, m := range got {
		dests = append(dests, m.Destination)
	}
	// Parents first; the image's /data is covered by the named volume,
	// its /cache becomes an anonymous one.
	if want := []string{"/data", "/t", "/run", "/cache", "/data/sub"}; !slices.Equal(dests, want) {
		t.Errorf("destinations %q, want %q", dests, want)
	}
	for _, m := range got {
		switch m.Destination {
		case "/cache":
			if !m.Anonymous || !m.CopyUp || m.Type != "volume" {
				t.Errorf("/cache: %+v, want an anonymous volume with copy-up", m)
			}
		case "/run":
			if !m.Hidden || !slices.Equal(m.Options, []string{"noexec", "nosuid", "nodev", "size=2m"}) {
				t.Errorf("/run: %+v", m)
			}
		}
	}
	if len(mountPoints(got)) != 4 {
		t.Errorf("inspect shows %d mounts, want 4 (--tmpfs hidden)", len(mountPoints(got)))
	}

	_, err = planMounts(&container.Config{}, &container.HostConfig{Binds: []string{"v1:/x", "v2:/x"}}, nil, nil)
	if !errdefs.IsInvalidArgument(err) || err.Error() != "Duplicate mount point: /x" {
		t.Errorf("duplicate: %v", err)
	}
}

// TestPlanMountsVolumesFrom: mounts inherited with --volumes-from stay
// unless -v or --mount names their destination, which replaces them, as
// under dockerd; the image's volumes do not cover them.
func TestPlanMountsVolumesFrom(t *testing.T) {
	inherited := []Mount{
		{MountPoint: container.MountPoint{Type: mount.TypeVolume, Name: "anon1", Destination: "/data", RW: true}},
		{MountPoint: container.MountPoint{Type: mount.TypeBind, Source: "/srv", Destination: "/hb"}},
	}
	cfg := &container.Config{Volumes: map[string]struct{}{"/hb": {}, "/cache": {}}}
	hc := &container.HostConfig{Binds: []string{"/tmp:/data"}}
	got, err := planMounts(cfg, hc, inherited, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	byDest := map[string]Mount{}
	for _, m := range got {
		byDest[m.Destination] = m
	}
	if len(got) != 3 || byDest["/data"].Type != mount.TypeBind || byDest["/data"].Source != "/tmp" ||
		byDest["/hb"].Source != "/srv" || byDest["/hb"].RW || !byDest["/cache"].Anonymous {
		t.Errorf("mounts %+v: want /data the -v bind, /hb inherited read-only, /cache the image's volume", got)
	}
	if _, err := planMounts(&container.Config{}, &container.HostConfig{Binds: []string{"/a:/data", "/b:/data"}}, inherited, nil); err == nil {
		t.Error("two -v at one inherited destination: no error")
	}
}

func TestParseVolumesFrom(t *testing.T) {
	for _, tc := range []struct {
		spec, ref string
		readOnly  bool
		wantErr   string
	}{
		{"data", "data", false, ""},
		{"data:ro", "data", true, ""},
		{"data:rw", "data", false, ""},
		{"data:ro,z", "data", true, ""},
		{"data:bogus", "", false, "invalid mode: bogus"},
		{"data:ro,rw", "", false, "invalid mode: ro,rw"},
		{"", "", false, "volumes-from specification cannot be an empty string"},
	} {
		ref, ro, err := parseVolumesFrom(tc.spec)
		if tc.wantErr != "" {
			if !errdefs.IsInvalidArgument(err) || err.Error() != tc.wantErr {
				t.Errorf("%q: error %v, want %q", tc.spec, err, tc.wantErr)
			}
			continue
		}
		if err != nil || ref != tc.ref || ro != tc.readOnly {
			t.Errorf("%q: %q %v %v, want %q %v", tc.spec, ref, ro, err, tc.ref, tc.readOnly)
		}
	}
}

func TestHasSharedMounts(t *testing.T) {
	tmpfsOnly := Record{Mounts: []Mount{{MountPoint: container.MountPoint{Type: "tmpfs", Destination: "/t"}}}}
	withVolume := Record{Mounts: []Mount{{MountPoint: container.MountPoint{Type: "volume", Destination: "/v"}}}}
	if (Record{}).HasSharedMounts() || tmpfsOnly.HasSharedMounts() || !withVolume.HasSharedMounts() {
		t.Error("HasSharedMounts: only bind and volume mounts are shared")
	}
}

// TestVolumeSubpath: symlinks inside the volume are followed while the
// result stays in it, as dockerd's safepath does; a missing path is not
// found, one that leaves the volume is refused.
func TestVolumeSubpath(t *testing.T) {
	vol := t.TempDir()
	if err := os.MkdirAll(filepath.Join(vol, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"in": "a/b", "out": "/etc", "up": "../.."} {
		if err := os.Symlink(target, filepath.Join(vol, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		subpath, want string
		is            func(error) bool
	}{
		{"a/b", "a/b", nil},
		{"in", "a/b", nil},
		{"nope", "", errdefs.IsNotFound},
		{"out", "", errdefs.IsInvalidArgument},
		{"up", "", errdefs.IsInvalidArgument},
	} {
		got, err := volumeSubpath(vol, tc.subpath)
		if tc.is == nil && (err != nil || got != tc.want) || tc.is != nil && !tc.is(err) {
			t.Errorf("%s: %q, %v; want %q", tc.subpath, got, err, tc.want)
		}
	}
}
