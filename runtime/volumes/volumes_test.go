package volumes

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/errdefs"
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
	s, err := New(root, quiet)
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

	s2, err := New(root, quiet)
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
	s, err := New(t.TempDir(), quiet)
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
		{volume.CreateRequest{Name: "v4", DriverOpts: map[string]string{"type": "tmpfs"}}, errdefs.IsNotImplemented, ""},
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
	s, err := New(t.TempDir(), quiet)
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
	s, err := New(t.TempDir(), quiet)
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
	}
	for _, tt := range filterTests {
		list, err := s.List(ctx, tt.filters)
		if err != nil || !slices.Equal(names(list.Volumes), tt.want) {
			t.Errorf("list %v: %v, %v; want %v", tt.filters, names(list.Volumes), err, tt.want)
		}
	}
	if _, err := s.List(ctx, map[string][]string{"foo": {"bar"}}); !errdefs.IsInvalidArgument(err) || err.Error() != "Invalid filter 'foo'" {
		t.Errorf("unknown filter: %v", err)
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
