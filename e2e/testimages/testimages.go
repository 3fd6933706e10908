// Package testimages builds the small images that husk's end-to-end tests
// and benchmarks run, and pushes them to a registry.
//
// The machine has no internet, so nothing is pulled from Docker Hub: every
// image is assembled here from the host's static busybox (Debian's
// busybox-static) with go-containerregistry, without a Docker daemon. All
// timestamps are fixed, so the same busybox binary always yields the same
// digests and image IDs.
//
// The images (repository names relative to the registry):
//
//   - husk/busybox: one layer — /bin/busybox plus a /bin symlink for every
//     applet it lists, /etc/passwd (root 0, app 1000:1000 with home
//     /home/app, nobody 65534), /etc/group (root 0, staff 50 with member
//     app, app 1000, nogroup 65534), /tmp mode 1777. Cmd ["sh"], Env PATH.
//   - husk/layered: busybox's layer plus three: the first adds /data/keep,
//     /data/gone, /opq/old1, /opq/old2 and /dirgone/file; the second whites
//     out /data/gone and /dirgone and makes /opq opaque, adding /opq/new;
//     the third adds /links/a, a hard link /links/b to it and a symlink
//     /links/c → a.
//   - husk/configured: busybox plus /work (owned by app), with Env
//     FOO=bar, WorkingDir /work, User app, Entrypoint ["/bin/sh","-c"] and
//     a Cmd that prints every one of those (see ConfiguredCmd), and a label.
//   - husk/saveload: busybox plus /saveload-marker, for save/load round
//     trips that must not disturb the other images.
//   - husk/multiarch: an index with linux/amd64 (busybox plus
//     /etc/arch-marker "amd64") and linux/arm64/v8 (only /etc/arch-marker
//     "arm64"), to prove that a pull selects amd64.
package testimages

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Repository names of the images, relative to the registry host.
const (
	Busybox    = "husk/busybox"
	Layered    = "husk/layered"
	Configured = "husk/configured"
	SaveLoad   = "husk/saveload"
	MultiArch  = "husk/multiarch"
	// Volume declares VOLUME /data over a /data owned by 1000:1000 (mode
	// 0750) holding seed (root, 0640, "seed\n").
	Volume = "husk/volume"
)

// DefaultBusybox is where Debian's busybox-static installs its binary.
const DefaultBusybox = "/bin/busybox"

// PathEnv is the PATH every image sets, Docker's usual default.
const PathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ConfiguredCmd is husk/configured's Cmd; run through its Entrypoint
// (sh -c) as user app it prints
// "cmd=default uid=1000 gid=1000 groups=1000 50 pwd=/work foo=bar home=/home/app".
const ConfiguredCmd = `echo "cmd=default uid=$(id -u) gid=$(id -g) groups=$(id -G) pwd=$(pwd) foo=$FOO home=$HOME"`

// ConfiguredLabel is a label key set on husk/configured (value "configured").
const ConfiguredLabel = "org.husk.test"

// epoch is the fixed time stamped on every file and config so that digests
// are reproducible.
var epoch = time.Unix(1700000000, 0).UTC()

// Set holds the built images, keyed by repository name.
type Set struct {
	Images  map[string]v1.Image
	Indexes map[string]v1.ImageIndex
}

// Build assembles every test image from the static busybox at busyboxPath.
func Build(ctx context.Context, busyboxPath string) (*Set, error) {
	base, err := busyboxImage(ctx, busyboxPath)
	if err != nil {
		return nil, err
	}
	layered, err := layeredImage(base)
	if err != nil {
		return nil, err
	}
	configured, err := configuredImage(base)
	if err != nil {
		return nil, err
	}
	saveload, err := appendFiles(base, file("saveload-marker", 0o644, "saveload\n"))
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", SaveLoad, err)
	}
	multi, err := multiArchIndex(base)
	if err != nil {
		return nil, err
	}
	vol, err := volumeImage(base)
	if err != nil {
		return nil, err
	}
	return &Set{
		Images: map[string]v1.Image{
			Busybox:    base,
			Layered:    layered,
			Configured: configured,
			SaveLoad:   saveload,
			Volume:     vol,
		},
		Indexes: map[string]v1.ImageIndex{MultiArch: multi},
	}, nil
}

// Ref is the reference ("host:port/repo:latest") under which Push stores
// repo in the registry at host.
func Ref(host, repo string) string {
	return host + "/" + repo + ":latest"
}

// Push writes every image of the set to the plain-HTTP registry at host
// (e.g. "127.0.0.1:5000") as repo:latest and returns the manifest digest of
// each, keyed by repository name. opts are passed to go-containerregistry,
// e.g. remote.WithTransport for a registry reachable only inside a network
// namespace.
func (s *Set) Push(ctx context.Context, host string, opts ...remote.Option) (map[string]v1.Hash, error) {
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	digests := make(map[string]v1.Hash, len(s.Images)+len(s.Indexes))
	for repo, img := range s.Images {
		ref, err := name.NewTag(Ref(host, repo), name.Insecure)
		if err != nil {
			return nil, fmt.Errorf("parse reference for %s: %w", repo, err)
		}
		if err := remote.Write(ref, img, opts...); err != nil {
			return nil, fmt.Errorf("push %s: %w", ref, err)
		}
		if digests[repo], err = img.Digest(); err != nil {
			return nil, fmt.Errorf("digest of %s: %w", repo, err)
		}
	}
	for repo, idx := range s.Indexes {
		ref, err := name.NewTag(Ref(host, repo), name.Insecure)
		if err != nil {
			return nil, fmt.Errorf("parse reference for %s: %w", repo, err)
		}
		if err := remote.WriteIndex(ref, idx, opts...); err != nil {
			return nil, fmt.Errorf("push %s: %w", ref, err)
		}
		if digests[repo], err = idx.Digest(); err != nil {
			return nil, fmt.Errorf("digest of %s: %w", repo, err)
		}
	}
	return digests, nil
}

func busyboxImage(ctx context.Context, busyboxPath string) (v1.Image, error) {
	bin, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("read busybox: %w", err)
	}
	// The applet list comes from the binary itself so that the image offers
	// exactly what this busybox build can do.
	out, err := exec.CommandContext(ctx, busyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets of %s: %w", busyboxPath, err)
	}
	entries := []entry{
		dir("bin", 0o755), dir("dev", 0o755), dir("etc", 0o755), dir("home", 0o755),
		dirOwned("home/app", 0o755, 1000, 1000), dir("proc", 0o555), dir("root", 0o700),
		dir("sbin", 0o755), dir("sys", 0o555), dir("tmp", 0o1777), dir("usr", 0o755),
		dir("usr/bin", 0o755), dir("usr/sbin", 0o755), dir("var", 0o755),
		fileBytes("bin/busybox", 0o755, bin),
		file("etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\n"+
			"app:x:1000:1000:app:/home/app:/bin/sh\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
		file("etc/group", 0o644, "root:x:0:\nstaff:x:50:app\napp:x:1000:\nnogroup:x:65534:\n"),
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		entries = append(entries, symlink("bin/"+applet, "busybox"))
	}
	layer, err := newLayer(entries...)
	if err != nil {
		return nil, fmt.Errorf("build busybox layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", Busybox, err)
	}
	return withConfig(img, "amd64", "", v1.Config{Cmd: []string{"sh"}, Env: []string{PathEnv}})
}

func layeredImage(base v1.Image) (v1.Image, error) {
	adds, err := newLayer(
		dir("data", 0o755), file("data/keep", 0o644, "keep\n"), file("data/gone", 0o644, "gone\n"),
		dir("opq", 0o755), file("opq/old1", 0o644, "old1\n"), file("opq/old2", 0o644, "old2\n"),
		dir("dirgone", 0o755), file("dirgone/file", 0o644, "file\n"),
	)
	if err != nil {
		return nil, fmt.Errorf("build layered adds layer: %w", err)
	}
	removes, err := newLayer(
		dir("data", 0o755), file("data/.wh.gone", 0o644, ""), file(".wh.dirgone", 0o644, ""),
		dir("opq", 0o755), file("opq/.wh..wh..opq", 0o644, ""), file("opq/new", 0o644, "new\n"),
	)
	if err != nil {
		return nil, fmt.Errorf("build layered whiteout layer: %w", err)
	}
	links, err := newLayer(
		dir("links", 0o755), file("links/a", 0o644, "hardlinked\n"),
		hardlink("links/b", "links/a"), symlink("links/c", "a"),
	)
	if err != nil {
		return nil, fmt.Errorf("build layered links layer: %w", err)
	}
	img, err := mutate.AppendLayers(base, adds, removes, links)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", Layered, err)
	}
	return img, nil
}

func configuredImage(base v1.Image) (v1.Image, error) {
	img, err := appendFiles(base, dirOwned("work", 0o755, 1000, 1000))
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", Configured, err)
	}
	return withConfig(img, "amd64", "", v1.Config{
		Env:        []string{PathEnv, "FOO=bar"},
		WorkingDir: "/work",
		User:       "app",
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd:        []string{ConfiguredCmd},
		Labels:     map[string]string{ConfiguredLabel: "configured"},
	})
}

func volumeImage(base v1.Image) (v1.Image, error) {
	img, err := appendFiles(base, dirOwned("data", 0o750, 1000, 1000), file("data/seed", 0o640, "seed\n"))
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", Volume, err)
	}
	return withConfig(img, "amd64", "", v1.Config{
		Env:     []string{PathEnv},
		Cmd:     []string{"sh"},
		Volumes: map[string]struct{}{"/data": {}},
	})
}

func multiArchIndex(base v1.Image) (v1.ImageIndex, error) {
	amd64, err := appendFiles(base, file("etc/arch-marker", 0o644, "amd64\n"))
	if err != nil {
		return nil, fmt.Errorf("build %s amd64: %w", MultiArch, err)
	}
	// The arm64 image is never run; it only has to differ visibly.
	marker, err := newLayer(dir("etc", 0o755), file("etc/arch-marker", 0o644, "arm64\n"))
	if err != nil {
		return nil, fmt.Errorf("build %s arm64 layer: %w", MultiArch, err)
	}
	arm64, err := mutate.AppendLayers(empty.Image, marker)
	if err != nil {
		return nil, fmt.Errorf("build %s arm64: %w", MultiArch, err)
	}
	if arm64, err = withConfig(arm64, "arm64", "v8", v1.Config{Cmd: []string{"sh"}, Env: []string{PathEnv}}); err != nil {
		return nil, err
	}
	// Docker schema 2 manifests belong in a Docker manifest list, the form
	// dockerd 20.10 and every registry understand.
	idx := mutate.IndexMediaType(empty.Index, types.DockerManifestList)
	idx = mutate.AppendManifests(idx,
		mutate.IndexAddendum{Add: amd64, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm64, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
	)
	return idx, nil
}

func appendFiles(base v1.Image, entries ...entry) (v1.Image, error) {
	layer, err := newLayer(entries...)
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(base, layer)
}

func withConfig(img v1.Image, arch, variant string, cfg v1.Config) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = arch
	cf.Variant = variant
	cf.OS = "linux"
	cf.Config = cfg
	cf.Created = v1.Time{Time: epoch}
	// History entries make `docker history` and dockerd's layer accounting
	// look like a real build: one per layer.
	cf.History = nil
	for range cf.RootFS.DiffIDs {
		cf.History = append(cf.History, v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "husk testimages"})
	}
	out, err := mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return out, nil
}

// entry is one member of a layer tarball.
type entry struct {
	hdr  tar.Header
	body []byte
}

func dir(path string, mode int64) entry { return dirOwned(path, mode, 0, 0) }

func dirOwned(path string, mode int64, uid, gid int) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: path + "/", Mode: mode, Uid: uid, Gid: gid}}
}

func file(path string, mode int64, content string) entry {
	return fileBytes(path, mode, []byte(content))
}

func fileBytes(path string, mode int64, content []byte) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: mode, Size: int64(len(content))}, body: content}
}

func symlink(path, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: path, Linkname: target, Mode: 0o777}}
}

func hardlink(path, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: path, Linkname: target, Mode: 0o644}}
}

// newLayer writes entries, sorted by name so that parents precede children
// and the bytes are reproducible, into a gzip-compressed Docker layer.
func newLayer(entries ...entry) (v1.Layer, error) {
	sorted := append([]entry(nil), entries...)
	sort.SliceStable(sorted, func(i, j int) bool {
		return strings.TrimSuffix(sorted[i].hdr.Name, "/") < strings.TrimSuffix(sorted[j].hdr.Name, "/")
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range sorted {
		hdr := e.hdr
		hdr.ModTime = epoch
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, fmt.Errorf("write tar header %s: %w", hdr.Name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("write tar body %s: %w", hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	raw := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("compress layer: %w", err)
	}
	return layer, nil
}
