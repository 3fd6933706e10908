package imagebuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/moby/moby/api/types/jsonstream"
	mobyregistry "github.com/moby/moby/api/types/registry"
)

// testRegistry serves an in-process registry on loopback and returns its
// host:port.
func testRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func push(t *testing.T, ref string, img v1.Image, opts ...remote.Option) v1.Hash {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func randomImage(t *testing.T, layers int64) v1.Image {
	t.Helper()
	img, err := random.Image(2048, layers)
	if err != nil {
		t.Fatal(err)
	}
	return withPlatform(t, img, "amd64")
}

func withPlatform(t *testing.T, img v1.Image, arch string) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Env = []string{"PATH=/bin"}
	cf.Config.Cmd = []string{"/bin/sh"}
	out, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func newService(t *testing.T, root string, inUse func(string) []string) *Service {
	t.Helper()
	if root == "" {
		root = t.TempDir()
	}
	s, err := New(Options{Root: root, InUse: inUse})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type recorder struct{ msgs []jsonstream.Message }

func (r *recorder) add(m jsonstream.Message) { r.msgs = append(r.msgs, m) }

// statuses returns "id|status" for each message, dropping repeated
// progress updates so the sequence is independent of chunking.
func (r *recorder) statuses() []string {
	var out []string
	for _, m := range r.msgs {
		s := m.ID + "|" + m.Status
		if len(out) > 0 && out[len(out)-1] == s && m.Progress != nil {
			continue
		}
		out = append(out, s)
	}
	return out
}

func (r *recorder) has(id, status string) bool {
	for _, m := range r.msgs {
		if m.ID == id && m.Status == status {
			return true
		}
	}
	return false
}

func pull(t *testing.T, s *Service, ref string) *recorder {
	t.Helper()
	rec := &recorder{}
	if err := s.Pull(context.Background(), ref, "", nil, rec.add); err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return rec
}

func layerIDs(t *testing.T, img v1.Image) []string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.Hex[:12])
	}
	return ids
}

func configID(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func TestPullProgressSequence(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 1)
	ref := host + "/test/a:v1"
	mdigest := push(t, ref, img)
	s := newService(t, "", nil)

	rec := pull(t, s, ref)
	id := layerIDs(t, img)[0]
	want := []string{
		"v1|Pulling from test/a",
		id + "|Pulling fs layer",
		id + "|Downloading",
		id + "|Verifying Checksum",
		id + "|Download complete",
		id + "|Extracting",
		id + "|Pull complete",
		"|Digest: " + mdigest.String(),
		"|Status: Downloaded newer image for " + ref,
	}
	if got := rec.statuses(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("progress:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, m := range rec.msgs {
		if m.Status == "Downloading" && (m.Progress == nil || m.Progress.Total <= 0 || m.Progress.Current <= 0) {
			t.Errorf("Downloading without progress detail: %+v", m)
		}
	}

	// dockerd (pull_v2's "image already exists locally") reports nothing
	// per layer for an image it has; checked against dockerd 20.10 by
	// e2e's TestDifferential ("pull up to date").
	again := pull(t, s, ref)
	want = []string{
		"v1|Pulling from test/a",
		"|Digest: " + mdigest.String(),
		"|Status: Image is up to date for " + ref,
	}
	if got := again.statuses(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("second pull:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	got, err := s.Inspect(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != configID(t, img) {
		t.Errorf("ID = %s, want config digest %s", got.ID, configID(t, img))
	}
	if len(got.RepoTags) != 1 || got.RepoTags[0] != ref {
		t.Errorf("RepoTags = %v", got.RepoTags)
	}
	if len(got.RepoDigests) != 1 || got.RepoDigests[0] != host+"/test/a@"+mdigest.String() {
		t.Errorf("RepoDigests = %v", got.RepoDigests)
	}
	if got.Architecture != "amd64" || got.Os != "linux" || got.RootFS.Type != "layers" || len(got.RootFS.Layers) != 1 {
		t.Errorf("inspect = %+v", got)
	}
	if got.Config == nil || len(got.Config.Cmd) != 1 || got.Config.Cmd[0] != "/bin/sh" {
		t.Errorf("Config = %+v", got.Config)
	}
	if got.Size <= 0 {
		t.Errorf("Size = %d", got.Size)
	}
}

func TestPullMultiArchPicksAmd64(t *testing.T) {
	host := testRegistry(t, nil)
	arm := withPlatform(t, randomImage(t, 1), "arm64")
	amd := randomImage(t, 2)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
	)
	ref := host + "/multi:latest"
	r, _ := name.ParseReference(ref)
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	idxDigest, _ := idx.Digest()
	s := newService(t, "", nil)
	rec := pull(t, s, host+"/multi")
	if last := rec.msgs[len(rec.msgs)-2]; last.Status != "Digest: "+idxDigest.String() {
		t.Errorf("digest line = %q, want index digest %s", last.Status, idxDigest)
	}
	img, err := s.Resolve(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if img.ID != configID(t, amd) || img.Config.Architecture != "amd64" {
		t.Errorf("resolved %s (%s), want amd64 image %s", img.ID, img.Config.Architecture, configID(t, amd))
	}
	if len(img.RepoDigests) != 1 || img.RepoDigests[0] != host+"/multi@"+idxDigest.String() {
		t.Errorf("RepoDigests = %v, want the index digest", img.RepoDigests)
	}

	// An explicit platform picks the other manifest.
	s2 := newService(t, "", nil)
	if err := s2.Pull(context.Background(), ref, "linux/arm64", nil, nil); err != nil {
		t.Fatal(err)
	}
	img, err = s2.Resolve(context.Background(), ref)
	if err != nil || img.ID != configID(t, arm) {
		t.Fatalf("arm64 pull resolved %v, %v", img, err)
	}
}

func TestPullSharedLayerAlreadyExists(t *testing.T) {
	host := testRegistry(t, nil)
	base := randomImage(t, 1)
	extra, err := random.Layer(4096, "application/vnd.docker.image.rootfs.diff.tar.gzip")
	if err != nil {
		t.Fatal(err)
	}
	child, err := mutate.AppendLayers(base, extra)
	if err != nil {
		t.Fatal(err)
	}
	push(t, host+"/base:1", base)
	push(t, host+"/child:1", child)
	s := newService(t, "", nil)
	pull(t, s, host+"/base:1")
	rec := pull(t, s, host+"/child:1")
	ids := layerIDs(t, child)
	if !rec.has(ids[0], "Already exists") {
		t.Errorf("shared layer %s not reported as existing: %v", ids[0], rec.statuses())
	}
	if rec.has(ids[0], "Downloading") {
		t.Errorf("shared layer %s downloaded again", ids[0])
	}
	if !rec.has(ids[1], "Pull complete") {
		t.Errorf("new layer %s not pulled: %v", ids[1], rec.statuses())
	}
	// base: manifest, config, 1 layer; child: manifest, config, 1 new layer.
	if n := countBlobs(t, s); n != 6 {
		t.Errorf("%d blobs stored, want 6 (shared layer once)", n)
	}
}

func countBlobs(t *testing.T, s *Service) int {
	t.Helper()
	hs, err := s.blobs.List()
	if err != nil {
		t.Fatal(err)
	}
	return len(hs)
}

func basicAuth(user, pass string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func TestPullAuth(t *testing.T) {
	host := testRegistry(t, basicAuth("alice", "s3cret"))
	ref := host + "/private:latest"
	push(t, ref, randomImage(t, 1), remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))
	s := newService(t, "", nil)

	// dockerd 20.10's words, and no unauthorized class: a 401 from the
	// daemon makes the docker CLI prompt for a login instead of failing.
	err := s.Pull(context.Background(), ref, "", &mobyregistry.AuthConfig{Username: "alice", Password: "wrong"}, nil)
	if err == nil || err.Error() != "unauthorized: authentication required" || errdefs.IsUnauthorized(err) {
		t.Fatalf("wrong password: err = %v (%T), want dockerd's 500", err, err)
	}
	err = s.Pull(context.Background(), ref, "", nil, nil)
	if want := `Head "http://` + host + `/v2/private/manifests/latest": no basic auth credentials`; err == nil || err.Error() != want || errdefs.IsUnauthorized(err) {
		t.Fatalf("no credentials: err = %v (%T), want %q", err, err, want)
	}
	if err := s.Pull(context.Background(), ref, "", &mobyregistry.AuthConfig{Username: "alice", Password: "s3cret"}, nil); err != nil {
		t.Fatalf("right password: %v", err)
	}
}

func TestPullErrors(t *testing.T) {
	host := testRegistry(t, nil)
	push(t, host+"/exists:v1", randomImage(t, 1))
	s := newService(t, "", nil)
	tests := []struct {
		ref   string
		class func(error) bool
		msg   string
	}{
		{host + "/exists:nope", errdefs.IsNotFound, "manifest for " + host + "/exists:nope not found: manifest unknown: Unknown manifest"},
		{host + "/nope", errdefs.IsNotFound, "repository " + host + "/nope not found: name unknown: Unknown name"},
		{"bad::ref", errdefs.IsInvalidArgument, "invalid reference format"},
		{"UPPER", errdefs.IsInvalidArgument, "invalid reference format: repository name (library/UPPER) must be lowercase"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			called := false
			err := s.Pull(context.Background(), tt.ref, "", nil, func(jsonstream.Message) { called = true })
			if err == nil || !tt.class(err) || err.Error() != tt.msg {
				t.Fatalf("err = %v, want %q", err, tt.msg)
			}
			if called {
				t.Error("progress was reported before the error")
			}
		})
	}
}

func TestPullPlainHTTPOnlyForInsecure(t *testing.T) {
	s := newService(t, "", nil)
	s.opts.InsecureRegistries = []string{"registry.internal:5000", "10.1.0.0/16"}
	tests := map[string]bool{
		"127.0.0.1:5000":         true,
		"localhost:5000":         true,
		"[::1]:5000":             true,
		"registry.internal:5000": true,
		"10.1.2.3:5000":          true,
		"10.2.0.1:5000":          false,
		"docker.io":              false,
	}
	for host, want := range tests {
		if got := s.insecure(host); got != want {
			t.Errorf("insecure(%s) = %v, want %v", host, got, want)
		}
	}
}

func TestPullByDigest(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 1)
	d := push(t, host+"/bydigest:v1", img)
	s := newService(t, "", nil)
	ref := host + "/bydigest@" + d.String()
	rec := pull(t, s, ref)
	if rec.msgs[0].ID != d.String() || rec.msgs[len(rec.msgs)-1].Status != "Status: Downloaded newer image for "+ref {
		t.Errorf("progress = %v", rec.statuses())
	}
	got, err := s.Resolve(context.Background(), ref)
	if err != nil || got.ID != configID(t, img) || len(got.RepoTags) != 0 {
		t.Fatalf("resolve by digest: %+v, %v", got, err)
	}
}

func TestResolve(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 1)
	d := push(t, host+"/r:v1", img)
	s := newService(t, "", nil)
	pull(t, s, host+"/r:v1")
	id := configID(t, img)
	hexID := strings.TrimPrefix(id, "sha256:")
	for _, ref := range []string{host + "/r:v1", host + "/r@" + d.String(), id, hexID, hexID[:12], "sha256:" + hexID[:8]} {
		got, err := s.Resolve(context.Background(), ref)
		if err != nil || got.ID != id {
			t.Errorf("Resolve(%s) = %v, %v", ref, got, err)
		}
	}
	_, err := s.Resolve(context.Background(), "nope")
	if !errdefs.IsNotFound(err) || err.Error() != "No such image: nope:latest" {
		t.Errorf("missing image: %v", err)
	}
}

func TestTagRemoveAndCollect(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 2)
	push(t, host+"/t:v1", img)
	s := newService(t, "", nil)
	ctx := context.Background()
	pull(t, s, host+"/t:v1")
	id := configID(t, img)
	if err := s.Tag(ctx, host+"/t:v1", "mine", "x"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Inspect(ctx, "mine:x")
	if err != nil || got.ID != id || got.Metadata.LastTagTime.IsZero() {
		t.Fatalf("tagged image: %+v, %v", got, err)
	}

	// Two tags: rmi by name only untags.
	resp, err := s.Remove(ctx, "mine:x", false, true)
	if err != nil || len(resp) != 1 || resp[0].Untagged != "mine:x" {
		t.Fatalf("untag: %+v, %v", resp, err)
	}
	if countBlobs(t, s) != 4 {
		t.Fatalf("untag removed blobs")
	}
	// Last tag: untag, its digest reference goes too, then the image.
	resp, err = s.Remove(ctx, host+"/t:v1", false, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp) != 5 || resp[0].Untagged != host+"/t:v1" || !strings.HasPrefix(resp[1].Untagged, host+"/t@sha256:") || resp[2].Deleted != id {
		t.Fatalf("delete: %+v", resp)
	}
	if n := countBlobs(t, s); n != 0 {
		t.Errorf("%d blobs left after deleting the only image", n)
	}
	if _, err := s.Remove(ctx, "x", false, true); !errdefs.IsNotFound(err) || err.Error() != "No such image: x:latest" {
		t.Errorf("rmi missing: %v", err)
	}
}

func TestRemoveKeepsSharedBlobs(t *testing.T) {
	host := testRegistry(t, nil)
	base := randomImage(t, 1)
	extra, _ := random.Layer(1024, "application/vnd.docker.image.rootfs.diff.tar.gzip")
	child, _ := mutate.AppendLayers(base, extra)
	push(t, host+"/base:1", base)
	push(t, host+"/child:1", child)
	s := newService(t, "", nil)
	pull(t, s, host+"/base:1")
	pull(t, s, host+"/child:1")
	resp, err := s.Remove(context.Background(), host+"/child:1", false, true)
	if err != nil {
		t.Fatal(err)
	}
	// Only the child's own top layer is reported deleted.
	var deleted []string
	for _, r := range resp {
		if r.Deleted != "" {
			deleted = append(deleted, r.Deleted)
		}
	}
	if len(deleted) != 2 {
		t.Errorf("deleted = %v, want image and its top layer", deleted)
	}
	layers, err := s.Layers(context.Background(), host+"/base:1")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0]()
	if err != nil {
		t.Fatalf("shared layer was collected: %v", err)
	}
	rc.Close()
	if n := countBlobs(t, s); n != 3 {
		t.Errorf("%d blobs, want 3", n)
	}
}

func TestRemoveConflicts(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 1)
	push(t, host+"/c:v1", img)
	id := configID(t, img)
	users := map[string][]string{}
	s := newService(t, "", func(imageID string) []string { return users[imageID] })
	ctx := context.Background()
	pull(t, s, host+"/c:v1")
	users[id] = []string{"0123456789abcdef0123"}
	short := strings.TrimPrefix(id, "sha256:")[:12]

	_, err := s.Remove(ctx, host+"/c:v1", false, false)
	want := `conflict: unable to remove repository reference "` + host + `/c:v1" (must force) - container 0123456789ab is using its referenced image ` + short
	if !errdefs.IsConflict(err) || err.Error() != want {
		t.Fatalf("in use: %v\nwant %s", err, want)
	}
	_, err = s.Remove(ctx, short, false, false)
	want = "conflict: unable to delete " + short + " (must be forced) - image is being used by stopped container 0123456789ab"
	if !errdefs.IsConflict(err) || err.Error() != want {
		t.Fatalf("in use by ID: %v\nwant %s", err, want)
	}

	users[id] = nil
	if err := s.Tag(ctx, id, "other", ""); err != nil {
		t.Fatal(err)
	}
	_, err = s.Remove(ctx, short, false, false)
	want = "conflict: unable to delete " + short + " (must be forced) - image is referenced in multiple repositories"
	if !errdefs.IsConflict(err) || err.Error() != want {
		t.Fatalf("multiple repos: %v\nwant %s", err, want)
	}
	resp, err := s.Remove(ctx, short, true, false)
	if err != nil || resp[len(resp)-2].Deleted != id {
		t.Fatalf("forced: %+v, %v", resp, err)
	}
	list, _ := s.List(ctx, false, nil)
	if len(list) != 0 {
		t.Errorf("images left: %+v", list)
	}
}

// TestRemoveRunningConflict: an image a running container uses is not
// deleted even by force, as dockerd refuses it: a forced removal by ID
// says so, one by its last tag only untags it.
func TestRemoveRunningConflict(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 1)
	push(t, host+"/r:v1", img)
	id := configID(t, img)
	short := strings.TrimPrefix(id, "sha256:")[:12]
	users := []string{"0123456789abcdef0123"}
	s, err := New(Options{Root: t.TempDir(),
		InUse:   func(string) []string { return users },
		Running: func(string) []string { return users },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pull(t, s, host+"/r:v1")
	want := "conflict: unable to delete " + short + " (cannot be forced) - image is being used by running container 0123456789ab"
	if _, err := s.Remove(ctx, short, true, false); !errdefs.IsConflict(err) || err.Error() != want {
		t.Errorf("forced removal by ID: %v\nwant %s", err, want)
	}
	resp, err := s.Remove(ctx, host+"/r:v1", true, false)
	if err != nil || len(resp) == 0 || resp[0].Untagged != host+"/r:v1" {
		t.Errorf("forced removal of the last tag: %+v, %v; want it untagged", resp, err)
	}
	for _, r := range resp {
		if r.Deleted != "" {
			t.Errorf("forced removal of the last tag deleted %s", r.Deleted)
		}
	}
	if _, err := s.Inspect(ctx, id); err != nil {
		t.Errorf("the running container's image is gone: %v", err)
	}
	users = nil
	if resp, err := s.Remove(ctx, short, false, false); err != nil || resp[0].Deleted != id {
		t.Errorf("removal once no container uses it: %+v, %v", resp, err)
	}
}

func TestListFilters(t *testing.T) {
	host := testRegistry(t, nil)
	a, b := randomImage(t, 1), randomImage(t, 1)
	push(t, host+"/a:1", a)
	push(t, host+"/b:1", b)
	push(t, host+"/b:2", a)
	s := newService(t, "", nil)
	ctx := context.Background()
	pull(t, s, host+"/a:1")
	pull(t, s, host+"/b:1")
	pull(t, s, host+"/b:1")
	// Moving b:1 away leaves b's old image with only its digest: dangling.
	if err := s.Tag(ctx, host+"/a:1", host+"/b", "1"); err != nil {
		t.Fatal(err)
	}
	all, err := s.List(ctx, false, nil)
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %+v, %v", all, err)
	}
	for _, im := range all {
		if im.RepoTags == nil || im.RepoDigests == nil || im.Containers != -1 || im.Size <= 0 {
			t.Errorf("summary %+v", im)
		}
	}
	dangling, err := s.List(ctx, false, map[string][]string{"dangling": {"true"}})
	if err != nil || len(dangling) != 1 || dangling[0].ID != configID(t, b) {
		t.Fatalf("dangling: %+v, %v", dangling, err)
	}
	byRef, err := s.List(ctx, false, map[string][]string{"reference": {host + "/a"}})
	if err != nil || len(byRef) != 1 || byRef[0].ID != configID(t, a) || len(byRef[0].RepoTags) != 1 {
		t.Fatalf("reference: %+v, %v", byRef, err)
	}
	if _, err := s.List(ctx, false, map[string][]string{"bogus": {"x"}}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("bogus filter: %v", err)
	}
	for _, vals := range [][]string{{"maybe"}, {"TRUE"}, {"true", "false"}} {
		want := fmt.Sprintf("invalid filter 'dangling=%v'", vals)
		if _, err := s.List(ctx, false, map[string][]string{"dangling": vals}); !errdefs.IsInvalidArgument(err) || err.Error() != want {
			t.Errorf("dangling=%v: %v, want %s", vals, err, want)
		}
	}
}

func TestPersistenceAcrossRestart(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 1)
	push(t, host+"/p:v1", img)
	root := t.TempDir()
	s := newService(t, root, nil)
	pull(t, s, host+"/p:v1")
	if err := s.Tag(context.Background(), host+"/p:v1", "keep", "me"); err != nil {
		t.Fatal(err)
	}
	s2 := newService(t, root, nil)
	got, err := s2.Inspect(context.Background(), "keep:me")
	if err != nil || got.ID != configID(t, img) || len(got.RepoTags) != 2 || len(got.RepoDigests) != 1 {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	rec := pull(t, s2, host+"/p:v1")
	if !strings.HasPrefix(rec.msgs[len(rec.msgs)-1].Status, "Status: Image is up to date") {
		t.Errorf("re-pull after restart: %v", rec.statuses())
	}
}

func TestLayersAreUncompressedDiffs(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 3)
	push(t, host+"/l:v1", img)
	s := newService(t, "", nil)
	pull(t, s, host+"/l:v1")
	got, err := s.Resolve(context.Background(), host+"/l:v1")
	if err != nil {
		t.Fatal(err)
	}
	assertLayersMatch(t, s, got)
}

func assertLayersMatch(t *testing.T, s *Service, img *Image) {
	t.Helper()
	layers, err := s.Layers(context.Background(), img.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != len(img.Config.RootFS.DiffIDs) {
		t.Fatalf("%d layers, %d diffIDs", len(layers), len(img.Config.RootFS.DiffIDs))
	}
	for i, open := range layers {
		rc, err := open()
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, rc); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != img.Config.RootFS.DiffIDs[i].String() {
			t.Errorf("layer %d digest %s, want diffID %s", i, got, img.Config.RootFS.DiffIDs[i])
		}
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	host := testRegistry(t, nil)
	a, b := randomImage(t, 2), randomImage(t, 1)
	push(t, host+"/s:a", a)
	push(t, host+"/s:b", b)
	s := newService(t, "", nil)
	ctx := context.Background()
	pull(t, s, host+"/s:a")
	pull(t, s, host+"/s:b")
	var buf bytes.Buffer
	if err := s.Save(ctx, []string{host + "/s"}, &buf); err != nil {
		t.Fatal(err)
	}

	fresh := newService(t, "", nil)
	rec := &recorder{}
	if err := fresh.Load(ctx, bytes.NewReader(buf.Bytes()), rec.add); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, m := range rec.msgs {
		if m.Stream != "" {
			lines = append(lines, m.Stream)
		}
	}
	want := []string{"Loaded image: " + host + "/s:a\n", "Loaded image: " + host + "/s:b\n"}
	if strings.Join(lines, "") != strings.Join(want, "") {
		t.Errorf("load output %q, want %q", lines, want)
	}
	for tag, img := range map[string]v1.Image{"a": a, "b": b} {
		got, err := fresh.Resolve(ctx, host+"/s:"+tag)
		if err != nil || got.ID != configID(t, img) {
			t.Fatalf("loaded %s: %+v, %v", tag, got, err)
		}
		assertLayersMatch(t, fresh, got)
	}
	// Only what the images need stays: 2 manifests, 2 configs, 3 layers.
	if n := countBlobs(t, fresh); n != 7 {
		t.Errorf("%d blobs after load, want 7", n)
	}

	// Saving by ID writes no tags; loading it reports the ID.
	var byID bytes.Buffer
	if err := s.Save(ctx, []string{configID(t, b)}, &byID); err != nil {
		t.Fatal(err)
	}
	rec = &recorder{}
	if err := newService(t, "", nil).Load(ctx, &byID, rec.add); err != nil {
		t.Fatal(err)
	}
	if len(rec.msgs) == 0 || rec.msgs[len(rec.msgs)-1].Stream != "Loaded image ID: "+configID(t, b)+"\n" {
		t.Errorf("load by ID: %+v", rec.msgs)
	}
}

// TestSaveUnknown: what save cannot find is named in dockerd's words: a
// name or ID as given, a tagged or digested reference as its reference
// store puts it.
func TestSaveUnknown(t *testing.T) {
	s := newService(t, "", nil)
	for ref, want := range map[string]string{
		"nosuch":     "No such image: nosuch",
		"abcdef123":  "No such image: abcdef123",
		"nosuch:tag": "reference does not exist",
		"nosuch@sha256:" + strings.Repeat("a", 64): "reference does not exist",
	} {
		err := s.Save(context.Background(), []string{ref}, io.Discard)
		if !errdefs.IsNotFound(err) || err.Error() != want {
			t.Errorf("save %s: %v, want not found: %s", ref, err, want)
		}
	}
	if err := s.Save(context.Background(), []string{"Bad:Ref"}, io.Discard); !errdefs.IsInvalidArgument(err) {
		t.Errorf("save Bad:Ref: %v, want an invalid reference", err)
	}
}

func TestLoadLegacyArchive(t *testing.T) {
	// go-containerregistry's tarball writes the pre-OCI docker-archive
	// layout (<hex>.tar.gz layers, sha256:<hex> config).
	img := randomImage(t, 2)
	tag, _ := name.NewTag("legacy/img:1")
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	s := newService(t, "", nil)
	rec := &recorder{}
	if err := s.Load(context.Background(), &buf, rec.add); err != nil {
		t.Fatal(err)
	}
	if rec.msgs[len(rec.msgs)-1].Stream != "Loaded image: legacy/img:1\n" {
		t.Errorf("load output: %+v", rec.msgs)
	}
	got, err := s.Resolve(context.Background(), "legacy/img:1")
	if err != nil || got.ID != configID(t, img) {
		t.Fatalf("resolve: %+v, %v", got, err)
	}
	assertLayersMatch(t, s, got)
}

func TestStoreRejectsBadDigest(t *testing.T) {
	s := newService(t, "", nil)
	bad := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
	if _, _, err := s.blobs.Put(strings.NewReader("hello"), bad); err == nil {
		t.Fatal("mismatching digest accepted")
	}
	if s.blobs.Has(bad) {
		t.Fatal("bad blob stored")
	}
	tmp, _ := os.ReadDir(filepath.Join(s.opts.Root, "blobs", "tmp"))
	if len(tmp) != 0 {
		t.Errorf("temporary files left: %d", len(tmp))
	}
}

func TestPullManyLayersWaitsAndConcurrentPullsAgree(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 5)
	push(t, host+"/many:1", img)
	s := newService(t, "", nil)
	ids := layerIDs(t, img)

	// Two pulls of the same image at once must both succeed and leave
	// one intact copy of each blob.
	recs := [2]*recorder{{}, {}}
	errs := make(chan error, 2)
	for i := range recs {
		go func() { errs <- s.Pull(context.Background(), host+"/many:1", "", nil, recs[i].add) }()
	}
	for range recs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Resolve(context.Background(), host+"/many:1")
	if err != nil {
		t.Fatal(err)
	}
	assertLayersMatch(t, s, got)
	if n := countBlobs(t, s); n != 7 {
		t.Errorf("%d blobs, want 7", n)
	}
	// With more layers than concurrent downloads, the extra ones wait
	// (in whichever pull found them missing).
	waited := 0
	for _, r := range recs {
		for _, id := range ids[maxConcurrentDownloads:] {
			if r.has(id, "Waiting") {
				waited++
			}
		}
	}
	if waited == 0 {
		t.Errorf("no layer reported Waiting: %v / %v", recs[0].statuses(), recs[1].statuses())
	}
}

// A reference with neither tag nor digest pulls every tag, in the
// registry's order, under one status line for the bare name, as dockerd
// does for `docker pull -a` and for an API pull without a tag.
func TestPullAllTags(t *testing.T) {
	host := testRegistry(t, nil)
	one, two := randomImage(t, 1), randomImage(t, 1)
	d1 := push(t, host+"/all:one", one)
	d2 := push(t, host+"/all:two", two)
	s := newService(t, "", nil)
	rec := pull(t, s, host+"/all")
	var got []string
	for _, st := range rec.statuses() {
		if strings.HasPrefix(st, "|") || strings.HasSuffix(st, "|Pulling from all") {
			got = append(got, st)
		}
	}
	want := []string{"one|Pulling from all", "|Digest: " + d1.String(), "two|Pulling from all", "|Digest: " + d2.String(),
		"|Status: Downloaded newer image for " + host + "/all"}
	if !slices.Equal(got, want) {
		t.Errorf("statuses %q, want %q", got, want)
	}
	for ref, img := range map[string]v1.Image{host + "/all:one": one, host + "/all:two": two} {
		if got, err := s.Resolve(context.Background(), ref); err != nil || got.ID != configID(t, img) {
			t.Errorf("Resolve(%s) = %+v, %v", ref, got, err)
		}
	}
	if _, err := s.Resolve(context.Background(), host+"/all:latest"); !errdefs.IsNotFound(err) {
		t.Errorf("a latest tag appeared: %v", err)
	}
	again := pull(t, s, host+"/all")
	if st := again.statuses(); st[len(st)-1] != "|Status: Image is up to date for "+host+"/all" {
		t.Errorf("second pull ends %q", st[len(st)-1])
	}
}

// A single-platform image is pulled for any --platform, and a platform it
// does not match gets dockerd's warning after the status line.
func TestPullWarnsOnPlatformMismatch(t *testing.T) {
	host := testRegistry(t, nil)
	ref := host + "/test/single:v1"
	push(t, ref, randomImage(t, 1))
	s := newService(t, "", nil)
	for _, tc := range []struct {
		platform, warning string
	}{
		{"linux/amd64", ""},
		{"linux/arm64", "WARNING: image with reference " + host + "/test/single was found but does not match the specified platform: wanted linux/arm64, actual: linux/amd64"},
	} {
		rec := &recorder{}
		if err := s.Pull(context.Background(), ref, tc.platform, nil, rec.add); err != nil {
			t.Fatalf("pull --platform %s: %v", tc.platform, err)
		}
		last := rec.msgs[len(rec.msgs)-1].Status
		if tc.warning == "" && strings.HasPrefix(last, "WARNING") || tc.warning != "" && last != tc.warning {
			t.Errorf("pull --platform %s ends with %q, want %q", tc.platform, last, tc.warning)
		}
	}
}
