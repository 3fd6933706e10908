package volumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/volume"
)

var quiet = slog.New(slog.DiscardHandler)

func names(vs []volume.Volume) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

func TestCreateInspectPersist(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := New(root, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Create(ctx, volume.CreateRequest{Name: "data", Labels: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Driver != "local" || v.Scope != "local" || v.Mountpoint != filepath.Join(root, "data", "_data") || v.Labels["a"] != "b" || v.CreatedAt == "" {
		t.Errorf("created %+v", v)
	}
	if st, err := os.Stat(v.Mountpoint); err != nil || !st.IsDir() {
		t.Fatalf("mountpoint: %v", err)
	}
	again, err := s.Create(ctx, volume.CreateRequest{Name: "data"})
	if err != nil || again.CreatedAt != v.CreatedAt || again.Labels["a"] != "b" {
		t.Errorf("creating an existing volume must return it: %+v, %v", again, err)
	}
	anon, err := s.Create(ctx, volume.CreateRequest{})
	if err != nil || len(anon.Name) != 64 {
		t.Errorf("a volume without a name gets a random 64-hex one: %q, %v", anon.Name, err)
	}
	if err := os.WriteFile(filepath.Join(v.Mountpoint, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A create that never finished: a directory without a record.
	if err := os.MkdirAll(filepath.Join(root, "half", "_data"), 0o755); err != nil {
		t.Fatal(err)
	}

	s2, err := New(root, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Inspect(ctx, "data")
	if err != nil || got.CreatedAt != v.CreatedAt || got.Labels["a"] != "b" {
		t.Errorf("after reopening: %+v, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(got.Mountpoint, "f")); err != nil {
		t.Errorf("data lost across reopening: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "half")); !os.IsNotExist(err) {
		t.Errorf("incomplete volume not cleaned up: %v", err)
	}
	list, err := s2.List(ctx, nil)
	want := []string{anon.Name, "data"}
	slices.Sort(want)
	if err != nil || !slices.Equal(names(list.Volumes), want) {
		t.Errorf("list after reopening: %v, %v", names(list.Volumes), err)
	}
}

func TestCreateErrors(t *testing.T) {
	ctx := context.Background()
	s, err := New(t.TempDir(), quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		req  volume.CreateRequest
		is   func(error) bool
		want string
	}{
		{volume.CreateRequest{Name: "bad/name"}, errdefs.IsInvalidArgument,
			`create bad/name: "bad/name" includes invalid characters for a local volume name, only "[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a host directory, use absolute path`},
		{volume.CreateRequest{Name: "a"}, errdefs.IsInvalidArgument,
			"create a: volume name is too short, names should be at least two alphanumeric characters"},
		{volume.CreateRequest{Name: "v3", Driver: "nope"}, errdefs.IsNotFound,
			`create v3: error looking up volume plugin nope: plugin "nope" not found`},
		{volume.CreateRequest{Name: "v5", DriverOpts: map[string]string{"foo": "bar"}}, errdefs.IsInvalidArgument,
			`create v5: invalid option: "foo"`},
		{volume.CreateRequest{Name: "v4", DriverOpts: map[string]string{"type": "tmpfs"}}, errdefs.IsInvalidArgument,
			`create v4: missing required option: "device"`},
		{volume.CreateRequest{Name: "v6", DriverOpts: map[string]string{"o": "bind", "device": "/srv"}}, errdefs.IsInvalidArgument,
			`create v6: missing required option: "type"`},
		{volume.CreateRequest{Name: "v7", DriverOpts: map[string]string{"size": "10m"}}, errdefs.IsInvalidArgument,
			"create v7: quota size requested but no quota support"},
	}
	for _, tt := range tests {
		_, err := s.Create(ctx, tt.req)
		if !tt.is(err) || tt.want != "" && err.Error() != tt.want {
			t.Errorf("create %+v: %v, want %q", tt.req, err, tt.want)
		}
	}
	if list, _ := s.List(ctx, nil); len(list.Volumes) != 0 {
		t.Errorf("failed creates left %v", names(list.Volumes))
	}
}

func TestInUse(t *testing.T) {
	ctx := context.Background()
	s, err := New(t.TempDir(), quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Use(ctx, volume.CreateRequest{Name: "shared"}, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Use(ctx, volume.CreateRequest{Name: "shared"}, "c2"); err != nil {
		t.Fatal(err)
	}
	err = s.Remove(ctx, v.Name, true)
	if !errdefs.IsConflict(err) || err.Error() != "remove shared: volume is in use - [c1, c2]" {
		t.Errorf("remove in use: %v", err)
	}
	if rep, err := s.Prune(ctx, map[string][]string{"all": {"true"}}); err != nil || len(rep.VolumesDeleted) != 0 {
		t.Errorf("prune removed an in-use volume: %v, %v", rep.VolumesDeleted, err)
	}
	list, err := s.List(ctx, map[string][]string{"dangling": {"true"}})
	if err != nil || len(list.Volumes) != 0 {
		t.Errorf("an in-use volume listed as dangling: %v, %v", names(list.Volumes), err)
	}
	s.Release("shared", "c1")
	s.Release("shared", "c2")
	list, _ = s.List(ctx, map[string][]string{"dangling": {"1"}})
	if !slices.Equal(names(list.Volumes), []string{"shared"}) {
		t.Errorf("dangling after release: %v", names(list.Volumes))
	}
	if err := s.Remove(ctx, "shared", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(v.Mountpoint); !os.IsNotExist(err) {
		t.Errorf("data left after remove: %v", err)
	}
	if err := s.Remove(ctx, "shared", false); !errdefs.IsNotFound(err) || err.Error() != "get shared: no such volume" {
		t.Errorf("remove missing: %v", err)
	}
	if err := s.Remove(ctx, "shared", true); err != nil {
		t.Errorf("forced remove of a missing volume: %v", err)
	}
	if err := s.Acquire("shared", "c3"); !errdefs.IsNotFound(err) {
		t.Errorf("acquire missing: %v", err)
	}
}

func TestPruneAndFilters(t *testing.T) {
	ctx := context.Background()
	s, err := New(t.TempDir(), quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	anon, err := s.Use(ctx, volume.CreateRequest{}, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := anon.Labels[AnonymousLabel]; !ok {
		t.Errorf("anonymous volume not labelled: %v", anon.Labels)
	}
	s.Release(anon.Name, "c1")
	for _, req := range []volume.CreateRequest{
		{Name: "keep", Labels: map[string]string{"keep": "yes"}},
		{Name: "named"},
	} {
		if _, err := s.Create(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.Mountpoint(anon.Name), "f"), make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}

	filterTests := []struct {
		filters map[string][]string
		want    []string
	}{
		// A substring that no anonymous (hex) name can contain.
		{map[string][]string{"name": {"eep"}}, []string{"keep"}},
		{map[string][]string{"label": {"keep=yes"}}, []string{"keep"}},
		{map[string][]string{"label": {"keep=no"}}, nil},
		{map[string][]string{"driver": {"local"}, "name": {"named", "keep"}}, []string{"keep", "named"}},
		// dockerd's names are regular expressions.
		{map[string][]string{"name": {"^ke+p$"}}, []string{"keep"}},
		{map[string][]string{"name": {"^(keep|named)$"}}, []string{"keep", "named"}},
		{map[string][]string{"name": {"["}}, nil},
	}
	for _, tt := range filterTests {
		list, err := s.List(ctx, tt.filters)
		if err != nil || !slices.Equal(names(list.Volumes), tt.want) {
			t.Errorf("list %v: %v, %v; want %v", tt.filters, names(list.Volumes), err, tt.want)
		}
	}
	if _, err := s.List(ctx, map[string][]string{"foo": {"bar"}}); !errdefs.IsInvalidArgument(err) || err.Error() != "invalid filter 'foo'" {
		t.Errorf("unknown filter: %v", err)
	}
	for _, vals := range [][]string{{"maybe"}, {"TRUE"}, {"true", "0"}} {
		want := fmt.Sprintf("invalid filter 'dangling=%v'", vals)
		if _, err := s.List(ctx, map[string][]string{"dangling": vals}); !errdefs.IsInvalidArgument(err) || err.Error() != want {
			t.Errorf("dangling=%v: %v, want %s", vals, err, want)
		}
	}

	for _, tt := range []struct {
		filters map[string][]string
		want    string
	}{
		{map[string][]string{"bogus": {"1"}}, "invalid filter 'bogus'"},
		{map[string][]string{"all": {"maybe"}}, `invalid filter 'all': strconv.ParseBool: parsing "maybe": invalid syntax`},
		{map[string][]string{"all": {"true", "false"}}, "invalid filter 'all=[true false]': only one value is expected"},
	} {
		if _, err := s.Prune(ctx, tt.filters); !errdefs.IsInvalidArgument(err) || err.Error() != tt.want {
			t.Errorf("prune %v: %v, want %s", tt.filters, err, tt.want)
		}
	}
	rep, err := s.Prune(ctx, nil)
	if err != nil || !slices.Equal(rep.VolumesDeleted, []string{anon.Name}) || rep.SpaceReclaimed != 100 {
		t.Errorf("prune without all: %+v, %v; want only the anonymous volume, 100 bytes", rep, err)
	}
	rep, err = s.Prune(ctx, map[string][]string{"all": {"true"}, "label!": {"keep"}})
	if err != nil || !slices.Equal(rep.VolumesDeleted, []string{"named"}) {
		t.Errorf("prune all but label keep: %+v, %v", rep, err)
	}
	list, _ := s.List(ctx, nil)
	if !slices.Equal(names(list.Volumes), []string{"keep"}) {
		t.Errorf("left after prune: %v", names(list.Volumes))
	}
}

// fakeMounter records mounts instead of making them.
type fakeMounter struct {
	mounted map[string]string // target: "type device options"
	calls   []string
	failOn  string // an operation that fails ("mount" or "unmount")
}

func (f *fakeMounter) Mount(device, target, fsType, options string) error {
	f.calls = append(f.calls, "mount "+filepath.Base(filepath.Dir(target)))
	if f.failOn == "mount" {
		return errors.New("mount " + device + ":" + target + ": no such file or directory")
	}
	f.mounted[target] = fsType + " " + device + " " + options
	return nil
}

func (f *fakeMounter) Unmount(target string) error {
	if _, ok := f.mounted[target]; !ok {
		return nil // as mount.Unmount: not mounted is no error
	}
	f.calls = append(f.calls, "unmount "+filepath.Base(filepath.Dir(target)))
	if f.failOn == "unmount" {
		return errors.New("device busy")
	}
	delete(f.mounted, target)
	return nil
}

func (f *fakeMounter) Mounted(path string) (bool, error) {
	_, ok := f.mounted[path]
	return ok, nil
}

// TestMountOptions: a volume with the local driver's mount options has
// its filesystem mounted on its _data when a container that uses it
// starts (once, however many run), unmounted when the last of them
// stops, as dockerd's local driver does (a tmpfs volume starts empty
// again), and is never removed while it stays mounted, since removing
// would delete what a bind volume's device holds.
func TestMountOptions(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := New(root, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	fm := &fakeMounter{mounted: map[string]string{}}
	s.mount = fm
	opts := map[string]string{"type": "none", "o": "bind", "device": "/srv/data"}
	v, err := s.Create(ctx, volume.CreateRequest{Name: "bound", DriverOpts: opts})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"c1", "c2"} {
		if _, err := s.Use(ctx, volume.CreateRequest{Name: "bound"}, c); err != nil {
			t.Fatal(err)
		}
	}
	if len(fm.calls) != 0 {
		t.Errorf("mounted at create or use: %v; dockerd mounts at start", fm.calls)
	}
	mount := func(c string) {
		t.Helper()
		path, err := s.Mount(ctx, "bound", c)
		if err != nil || path != v.Mountpoint {
			t.Fatalf("Mount for %s = %q, %v; want %s", c, path, err, v.Mountpoint)
		}
	}
	mount("c1")
	mount("c2")
	if got := fm.mounted[v.Mountpoint]; got != "none /srv/data bind" {
		t.Errorf("mounted %q, want none /srv/data bind", got)
	}
	s.Unmount("bound", "c1")
	if len(fm.mounted) != 1 {
		t.Errorf("unmounted when c1 stopped while c2 runs")
	}
	mount("c1") // restarted
	s.Unmount("bound", "c1")
	s.Unmount("bound", "c2")
	if len(fm.mounted) != 0 {
		t.Errorf("still mounted once neither container runs: %v", fm.mounted)
	}
	if want := "mount bound,unmount bound"; strings.Join(fm.calls, ",") != want {
		t.Errorf("calls %v, want %s", fm.calls, want)
	}

	// A daemon that restarts finds the volume mounted; giving it back
	// for a container that no longer runs unmounts it.
	mount("c1")
	s2, err := New(root, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2.mount = fm
	s2.Unmount("bound", "c1")
	if len(fm.mounted) != 0 {
		t.Errorf("a restarted store left mounted what no container runs with: %v", fm.mounted)
	}

	// A volume whose unmount fails is not removed: its directory would
	// take the device's files with it.
	mount("c1")
	fm.failOn = "unmount"
	s.Unmount("bound", "c1")
	s.Release("bound", "c1")
	s.Release("bound", "c2")
	if err := s.Remove(ctx, "bound", false); err == nil {
		t.Errorf("removed a volume that stayed mounted")
	}
	if _, err := os.Stat(v.Mountpoint); err != nil {
		t.Errorf("a failed unmount lost the volume's directory: %v", err)
	}
	fm.failOn = ""
	if err := s.Remove(ctx, "bound", false); err != nil {
		t.Fatal(err)
	}
	if len(fm.mounted) != 0 {
		t.Errorf("left mounted: %v", fm.mounted)
	}

	// A mount that fails says so in dockerd's words; a volume without
	// options is never mounted.
	fm.failOn = "mount"
	if _, err := s.Create(ctx, volume.CreateRequest{Name: "broken", DriverOpts: opts}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Mount(ctx, "broken", "c3")
	if want := "error while mounting volume '" + s.Mountpoint("broken") + "': failed to mount local volume: mount /srv/data:"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("failed mount: %v, want %s...", err, want)
	}
	fm.calls = nil
	if _, err := s.Create(ctx, volume.CreateRequest{Name: "plain"}); err != nil {
		t.Fatal(err)
	}
	if path, err := s.Mount(ctx, "plain", "c3"); err != nil || path != s.Mountpoint("plain") || len(fm.calls) != 0 {
		t.Errorf("Mount of a plain volume = %q, %v, calls %v", path, err, fm.calls)
	}
}

// recordedEvents keeps what was published, as "type action id attrs".
type recordedEvents []string

func (r *recordedEvents) Publish(typ events.Type, action events.Action, id string, attrs map[string]string) {
	*r = append(*r, fmt.Sprintf("%s %s %s %v", typ, action, id, attrs))
}

// TestVolumeEvents: every create (of a volume that was there too, as
// dockerd reports it), every removal and each prune is published.
func TestVolumeEvents(t *testing.T) {
	ctx := context.Background()
	var got recordedEvents
	s, err := New(t.TempDir(), quiet, &got)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, volume.CreateRequest{Name: "data"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Use(ctx, volume.CreateRequest{Name: "data"}, "c1"); err != nil {
		t.Fatal(err)
	}
	s.Release("data", "c1")
	if err := s.Remove(ctx, "data", false); err != nil {
		t.Fatal(err)
	}
	anon, err := s.Use(ctx, volume.CreateRequest{}, "c2")
	if err != nil {
		t.Fatal(err)
	}
	s.Release(anon.Name, "c2")
	if _, err := s.Prune(ctx, nil); err != nil {
		t.Fatal(err)
	}
	want := recordedEvents{
		"volume create data map[driver:local]",
		"volume create data map[driver:local]",
		"volume destroy data map[driver:local]",
		"volume create " + anon.Name + " map[driver:local]",
		"volume destroy " + anon.Name + " map[driver:local]",
		"volume prune  map[reclaimed:0]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
