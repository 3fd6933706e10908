package e2e

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
)

// buildxEnv is where a prebuilt docker-buildx plugin may be given.
const buildxEnv = "HUSK_BUILDX_BIN"

// buildxConfig returns a docker client configuration directory whose one
// CLI plugin is buildx: the binary named by HUSK_BUILDX_BIN, else one
// built from its Go module (cached in the temp dir across runs). With
// buildx installed, docker build goes through it to the daemon's BuildKit
// (POST /grpc), as on a machine with Docker's own packages; the rest of
// the suite keeps the classic POST /build.
func buildxConfig(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(buildxEnv)
	if bin == "" {
		bin = filepath.Join(os.TempDir(), "husk-e2e-buildx-"+harness.BuildxVersion, "docker-buildx")
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
		defer cancel()
		if err := harness.BuildBuildx(ctx, bin); err != nil {
			t.Fatalf("no buildx: set %s to a docker-buildx plugin binary, or let the suite build it (needs go and the module proxy): %v", buildxEnv, err)
		}
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "cli-plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "cli-plugins", "docker-buildx")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(suite.DockerConfig, "config.json")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// dockerWithConfig runs the docker CLI against the daemon under test with
// the client configuration in dir.
func dockerWithConfig(t *testing.T, dir string, args ...string) result {
	t.Helper()
	env := append(dockerEnv(), "DOCKER_CONFIG="+dir)
	res := runCLI(t, env, nil, args...)
	t.Logf("$ docker %s (buildx)\n  exit %d, stdout %q, stderr %q", strings.Join(args, " "), res.Code, clip(res.Stdout), clip(res.Stderr))
	return res
}

// TestBuildx: docker build with buildx installed reaches the daemon's
// BuildKit through buildx's docker driver: it builds and tags an image,
// runs steps with cache, tmpfs, bind and secret mounts, pushes one
// (--push), and sends
// a build's files back to the client as a directory and as a tar (-o). Steps run with no network, which the reference dockerd (no
// bridge) can give them.
func TestBuildx(t *testing.T) {
	requireSuite(t)
	cfg := buildxConfig(t)
	img := pulled(t, testimages.Busybox)
	dir := writeContext(t, map[string]string{
		"Dockerfile":    "FROM " + img + "\nARG WHO=nobody\nRUN echo \"hello $WHO\" > /greeting\nCOPY keep.txt /\n",
		"keep.txt":      "kept\n",
		"secret.txt":    "ignored\n",
		".dockerignore": "secret.txt\n",
	})

	ls := dockerWithConfig(t, cfg, "buildx", "ls")
	if ls.Code != 0 || !strings.Contains(ls.Stdout, "running") || strings.Contains(ls.Stdout, "docker-container") {
		t.Errorf("buildx ls: %+v, want the daemon's own builder running", ls)
	}

	tag := namePrefix(t)
	t.Cleanup(func() { docker(t, "rmi", "-f", tag) })
	if r := dockerWithConfig(t, cfg, "build", "--network", "none", "--build-arg", "WHO=buildx", "-t", tag, dir); r.Code != 0 {
		t.Fatalf("docker build through buildx: %+v", r)
	}
	if got := mustDocker(t, "run", "--rm", "--network", "none", tag, "cat", "/greeting", "/keep.txt"); got != "hello buildx\nkept\n" {
		t.Errorf("the built image holds %q", got)
	}

	// RUN --mount=type=cache and type=tmpfs: the step writes into them,
	// and nothing it wrote there is in the image.
	mounted := writeContext(t, map[string]string{"Dockerfile": "FROM " + img + "\n" +
		"RUN --mount=type=cache,target=/var/cache/husk --mount=type=tmpfs,target=/scratch sh -c 'echo c > /var/cache/husk/c && echo s > /scratch/s'\n"})
	mountTag := tag + "-mounts"
	t.Cleanup(func() { docker(t, "rmi", "-f", mountTag) })
	if r := dockerWithConfig(t, cfg, "build", "--network", "none", "-t", mountTag, mounted); r.Code != 0 {
		t.Fatalf("docker build with RUN --mount: %+v", r)
	}
	if got := mustDocker(t, "run", "--rm", "--network", "none", mountTag, "sh", "-c", "cat /var/cache/husk/c /scratch/s 2>/dev/null; echo end"); got != "end\n" {
		t.Errorf("the mounts' files reached the image: %q", got)
	}

	// RUN --mount=type=bind (from the context) and type=secret (from the
	// client): the step reads them, and neither reaches the image.
	tok := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tok, []byte("s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bound := writeContext(t, map[string]string{"keep.txt": "kept\n", "Dockerfile": "FROM " + img + "\n" +
		"RUN --mount=type=bind,source=keep.txt,target=/k --mount=type=secret,id=tok sh -c 'cat /k > /fromk; wc -c < /run/secrets/tok > /toklen'\n"})
	boundTag := tag + "-bound"
	t.Cleanup(func() { docker(t, "rmi", "-f", boundTag) })
	if r := dockerWithConfig(t, cfg, "build", "--network", "none", "--secret", "id=tok,src="+tok, "-t", boundTag, bound); r.Code != 0 {
		t.Fatalf("docker build with bind and secret mounts: %+v", r)
	}
	if got := mustDocker(t, "run", "--rm", "--network", "none", boundTag, "sh", "-c", "cat /fromk; tr -d ' ' < /toklen; cat /run/secrets/tok 2>/dev/null; echo end"); got != "kept\n7\nend\n" {
		t.Errorf("the image built with bind and secret mounts holds %q", got)
	}

	// --push: buildx pushes what the build tagged through the daemon.
	pushed := suite.Registry + "/husk/" + namePrefix(t) + ":pushed"
	t.Cleanup(func() { docker(t, "rmi", "-f", pushed) })
	if r := dockerWithConfig(t, cfg, "build", "--network", "none", "--push", "-t", pushed, dir); r.Code != 0 {
		t.Fatalf("docker build --push: %+v", r)
	}
	mustDocker(t, "rmi", pushed)
	mustDocker(t, "pull", pushed)

	out := filepath.Join(t.TempDir(), "out")
	if r := dockerWithConfig(t, cfg, "build", "--network", "none", "-o", "type=local,dest="+out, dir); r.Code != 0 {
		t.Fatalf("docker build -o type=local: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(out, "greeting")); err != nil || string(b) != "hello nobody\n" {
		t.Errorf("exported greeting = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(out, "secret.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an ignored file was exported: %v", err)
	}

	tarFile := filepath.Join(t.TempDir(), "out.tar")
	if r := dockerWithConfig(t, cfg, "build", "--network", "none", "-o", "type=tar,dest="+tarFile, dir); r.Code != 0 {
		t.Fatalf("docker build -o type=tar: %+v", r)
	}
	f, err := os.Open(tarFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if !slices.Contains(names, "greeting") || !slices.Contains(names, "keep.txt") {
		t.Errorf("the exported tar holds %q", names)
	}

	// dockerd builds it from the local amd64 image, running its amd64
	// programs; husk's build VMs are amd64 and say so.
	if suite.Kind == harness.Huskd {
		r := dockerWithConfig(t, cfg, "build", "--network", "none", "--platform", "linux/s390x", dir)
		if r.Code == 0 || !strings.Contains(r.Stderr, "husk builds only linux/amd64 images") {
			t.Errorf("a build for another platform: %+v", r)
		}
	}
}
