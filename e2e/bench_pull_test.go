package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// benchCache keeps the pull scenario's image between runs of the bench:
// a debootstrapped Debian takes minutes to make.
const (
	benchCacheEnv     = "HUSK_BENCH_CACHE"
	defaultBenchCache = "/var/cache/husk-bench"
)

// benchPull measures pulling a ~200 MB image from a local registry:
// through huskd, pull and create (which converts the layers into the
// image's base ext4), against dockerd's pull (which unpacks them into
// overlay2). Each run starts with neither the image nor its disk.
func benchPull(t *testing.T, b *benchResults, ref *referenceDockerd, runs int) {
	if ref == nil {
		b.notes = append(b.notes, "pull_convert_over_dockerd_pull not measured: no dockerd")
		return
	}
	layer, what, err := bigLayer(t)
	if err != nil {
		t.Fatal(err)
	}
	b.machine["pull_image"] = what
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	if size, err := layer.Size(); err == nil {
		b.machine["pull_image_compressed_mib"] = size >> 20
	}
	huskRef := suite.Registry + "/husk/bench-big:latest"
	peerRef := ref.registry.Host + "/husk/bench-big:latest"
	for _, p := range []struct {
		ref string
		rt  remote.Option
	}{{huskRef, remote.WithTransport(suiteNetns().Transport())}, {peerRef, remote.WithTransport(ref.ns.Transport())}} {
		r, err := name.ParseReference(p.ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(r, img, p.rt); err != nil {
			t.Fatalf("push %s: %v", p.ref, err)
		}
	}
	cli := func(host string, args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, suite.DockerCLI, append([]string{"--host", host}, args...)...)
		cmd.Env = dockerEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("docker %s via %s: %v: %s", strings.Join(args, " "), host, err, out)
		}
		return nil
	}
	ctrName := namePrefix(t) + "-pull"
	husk := func() error {
		if err := cli(suite.DockerHost, "pull", "-q", huskRef); err != nil {
			return err
		}
		return cli(suite.DockerHost, "create", "--name", ctrName, huskRef, "true")
	}
	huskReset := func() error {
		if err := cli(suite.DockerHost, "rm", "-f", ctrName); err != nil {
			return err
		}
		return cli(suite.DockerHost, "rmi", huskRef)
	}
	peer := func() error { return cli(ref.host, "pull", "-q", peerRef) }
	peerReset := func() error { return cli(ref.host, "rmi", peerRef) }
	b.alternateTimed(t, runs, []timedScenario{
		{benchScenario{"pull_convert_husk", "pull + convert ~200 MB image (huskd)", husk}, huskReset},
		{benchScenario{"pull_dockerd", "pull ~200 MB image (dockerd)", peer}, peerReset},
	})
	b.ratio("pull_convert_over_dockerd_pull", "pull_convert_husk", "pull_dockerd")
}

// bigLayer is the pull scenario's one layer: a debootstrapped Debian
// bookworm (minbase plus python3-minimal, ~235 MB unpacked) from the
// machine's apt mirror, made once and cached; where debootstrap cannot
// run, busybox plus 200 MB of random files, said so in what.
func bigLayer(t *testing.T) (_ v1.Layer, what string, err error) {
	cache := os.Getenv(benchCacheEnv)
	if cache == "" {
		cache = defaultBenchCache
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, "", err
	}
	tarPath := filepath.Join(cache, "debian-bookworm-minbase.tar")
	what = "debootstrap bookworm minbase + python3-minimal"
	if _, err := os.Stat(tarPath); err != nil {
		if derr := debootstrapTar(cache, tarPath); derr != nil {
			t.Logf("bench: debootstrap unavailable (%v); using busybox + 200 MB of random files", derr)
			what = "busybox + 200 MB of random files (debootstrap unavailable)"
			tarPath = filepath.Join(cache, "random-200m.tar")
			if _, err := os.Stat(tarPath); err != nil {
				if err := randomTar(cache, tarPath); err != nil {
					return nil, "", err
				}
			}
		}
	}
	l, err := tarball.LayerFromFile(tarPath, tarball.WithCompressedCaching)
	if err != nil {
		return nil, "", fmt.Errorf("layer from %s: %w", tarPath, err)
	}
	return l, what, nil
}

// debootstrapTar makes tarPath from a fresh debootstrap, through a
// temporary name so that an interrupted run leaves nothing half made.
func debootstrapTar(cache, tarPath string) error {
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return err
	}
	mirror, err := aptMirror()
	if err != nil {
		return err
	}
	root, err := os.MkdirTemp(cache, "rootfs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include=python3-minimal", "bookworm", root, mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("debootstrap from %s: %v: %s", mirror, err, lastLines(string(out), 5))
	}
	tmp := tarPath + ".tmp"
	if out, err := exec.CommandContext(ctx, "tar", "--numeric-owner", "-C", root, "-cf", tmp, ".").CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("tar the rootfs: %v: %s", err, out)
	}
	return os.Rename(tmp, tarPath)
}

// aptMirror is the first Debian archive URI the machine's apt uses.
func aptMirror() (string, error) {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append([]string{"/etc/apt/sources.list"}, files...)
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			for i, w := range fields {
				isURI := (w == "URIs:" && i+1 < len(fields)) || (w == "deb" && i+1 < len(fields))
				if isURI && strings.HasPrefix(fields[i+1], "http") && !strings.Contains(fields[i+1], "security") {
					f.Close()
					return fields[i+1], nil
				}
			}
		}
		f.Close()
	}
	return "", fmt.Errorf("no Debian mirror in /etc/apt")
}

// randomTar is busybox plus 200 MB of incompressible files.
func randomTar(cache, tarPath string) error {
	root, err := os.MkdirTemp(cache, "random-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "/bin/busybox", filepath.Join(root, "bin", "sh")).CombinedOutput(); err != nil {
		return fmt.Errorf("copy busybox: %v: %s", err, out)
	}
	for i := range 50 {
		f, err := os.Create(filepath.Join(root, fmt.Sprintf("blob-%02d", i)))
		if err != nil {
			return err
		}
		_, err = io.CopyN(f, rand.Reader, 4<<20)
		f.Close()
		if err != nil {
			return err
		}
	}
	tmp := tarPath + ".tmp"
	if out, err := exec.Command("tar", "-C", root, "-cf", tmp, ".").CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("tar: %v: %s", err, out)
	}
	return os.Rename(tmp, tarPath)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
