package testimages

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func buildSet(t *testing.T) *Set {
	t.Helper()
	if _, err := os.Stat(DefaultBusybox); err != nil {
		t.Skipf("needs a static busybox at %s (Debian busybox-static): %v", DefaultBusybox, err)
	}
	set, err := Build(context.Background(), DefaultBusybox)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return set
}

// flatten returns every path of img's flattened filesystem with its tar
// header, as a container would see it.
func flatten(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("read flattened image: %v", err)
		}
		files[strings.TrimSuffix(hdr.Name, "/")] = hdr
	}
}

func TestBusyboxContents(t *testing.T) {
	files := flatten(t, buildSet(t).Images[Busybox])
	for _, p := range []string{"bin/busybox", "bin/sh", "bin/id", "etc/passwd", "etc/group", "home/app"} {
		if files[p] == nil {
			t.Errorf("busybox image lacks /%s", p)
		}
	}
	if h := files["tmp"]; h == nil || h.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp header = %+v, want mode 1777", h)
	}
	if h := files["bin/sh"]; h != nil && (h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox") {
		t.Errorf("/bin/sh = %q → %q, want a symlink to busybox", h.Typeflag, h.Linkname)
	}
	if h := files["home/app"]; h != nil && (h.Uid != 1000 || h.Gid != 1000) {
		t.Errorf("/home/app owned by %d:%d, want 1000:1000", h.Uid, h.Gid)
	}
}

func TestLayeredFlattensWhiteouts(t *testing.T) {
	img := buildSet(t).Images[Layered]
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 4 {
		t.Fatalf("layered has %d layers, want busybox's + 3", len(layers))
	}
	files := flatten(t, img)
	var data, opq []string
	for p := range files {
		if d, f, ok := strings.Cut(p, "/"); ok {
			switch d {
			case "data":
				data = append(data, f)
			case "opq":
				opq = append(opq, f)
			}
		}
	}
	slices.Sort(data)
	slices.Sort(opq)
	if !slices.Equal(data, []string{"keep"}) || !slices.Equal(opq, []string{"new"}) {
		t.Errorf("flattened /data = %v, /opq = %v; want [keep] and [new]", data, opq)
	}
	if files["dirgone"] != nil || files["dirgone/file"] != nil {
		t.Error("whited-out /dirgone survived flattening")
	}
	if h := files["links/b"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "links/a" {
		t.Errorf("/links/b = %+v, want a hard link to links/a", h)
	}
}

func TestConfiguredConfig(t *testing.T) {
	cf, err := buildSet(t).Images[Configured].ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "app" || c.WorkingDir != "/work" || !slices.Equal(c.Entrypoint, []string{"/bin/sh", "-c"}) ||
		!slices.Equal(c.Cmd, []string{ConfiguredCmd}) || !slices.Contains(c.Env, "FOO=bar") ||
		c.Labels[ConfiguredLabel] != "configured" {
		t.Errorf("configured config = %+v", c)
	}
	if cf.Architecture != "amd64" || cf.OS != "linux" {
		t.Errorf("platform = %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	a, b := buildSet(t), buildSet(t)
	for repo, img := range a.Images {
		da, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		db, err := b.Images[repo].Digest()
		if err != nil {
			t.Fatal(err)
		}
		if da != db {
			t.Errorf("%s: digests differ between builds: %s vs %s", repo, da, db)
		}
	}
}

func TestPushAndPlatformSelection(t *testing.T) {
	set := buildSet(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	digests, err := set.Push(context.Background(), host)
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	for _, repo := range []string{Busybox, Layered, Configured, SaveLoad, MultiArch} {
		ref, err := name.ParseReference(Ref(host, repo), name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Head(ref)
		if err != nil {
			t.Fatalf("HEAD %s: %v", ref, err)
		}
		if desc.Digest != digests[repo] {
			t.Errorf("%s: registry has %s, Push reported %s", repo, desc.Digest, digests[repo])
		}
	}

	ref, err := name.ParseReference(Ref(host, MultiArch), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	for arch, want := range map[string]string{"amd64": "amd64\n", "arm64": "arm64\n"} {
		img, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}))
		if err != nil {
			t.Fatalf("pull %s for %s: %v", ref, arch, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != arch {
			t.Errorf("%s entry has config architecture %q", arch, cf.Architecture)
		}
		if got := readFile(t, img, "etc/arch-marker"); got != want {
			t.Errorf("%s: /etc/arch-marker = %q, want %q", arch, got, want)
		}
	}
}

func readFile(t *testing.T, img v1.Image, path string) string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("find %s: %v", path, err)
		}
		if hdr.Name == path {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
}
