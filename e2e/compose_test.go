package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
)

// composeEnv is where a prebuilt docker-compose plugin may be given.
const composeEnv = "HUSK_COMPOSE_BIN"

// composePlugin installs Docker Compose as a CLI plugin of the suite's
// client config: the binary named by HUSK_COMPOSE_BIN, else one built
// from its Go module (cached in the temp dir across runs, since the build
// takes minutes).
func composePlugin(t *testing.T) {
	t.Helper()
	bin := os.Getenv(composeEnv)
	if bin == "" {
		bin = filepath.Join(os.TempDir(), "husk-e2e-compose-"+harness.ComposeVersion, "docker-compose")
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
		defer cancel()
		if err := harness.BuildCompose(ctx, bin); err != nil {
			t.Fatalf("no docker compose: set %s to a docker-compose plugin binary, or let the suite build it (needs go and the module proxy): %v", composeEnv, err)
		}
	}
	dir := filepath.Join(suite.DockerConfig, "cli-plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "docker-compose")
	if _, err := os.Lstat(link); err != nil {
		if err := os.Symlink(bin, link); err != nil {
			t.Fatal(err)
		}
	}
	mustDocker(t, "compose", "version")
}

// TestCompose: a two-service app — a web server with a named volume and a
// published port, and a client that reaches it by service name and
// writes into a volume compose's driver_opts bind to a host directory —
// through up -d, ps, logs and down -v.
func TestCompose(t *testing.T) {
	requireBridge(t)
	composePlugin(t)
	img := pulled(t, testimages.Busybox)
	project := strings.ReplaceAll(namePrefix(t), "-", "")
	dir := t.TempDir()
	file := filepath.Join(dir, "compose.yaml")
	hostData := t.TempDir()
	spec := `services:
  web:
    image: ` + img + `
    command: ["sh", "-c", "echo hello-from-web > /www/index.html && exec httpd -f -v -p 80 -h /www"]
    volumes: ["site:/www"]
    ports: ["127.0.0.1::80"]
  client:
    image: ` + img + `
    command: ["sh", "-c", "until wget -q -O- http://web/; do sleep 1; done; echo from-compose > /data/out; echo client-done; sleep 1000"]
    volumes: ["data:/data"]
    depends_on: [web]
volumes:
  site: {}
  data:
    driver_opts: {type: none, o: bind, device: "` + hostData + `"}
`
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	compose := func(args ...string) result {
		return docker(t, append([]string{"compose", "-p", project, "-f", file}, args...)...)
	}
	t.Cleanup(func() { compose("down", "-v", "--timeout", "1") })

	if r := compose("up", "-d"); r.Code != 0 {
		t.Fatalf("compose up -d: %+v", r)
	}
	ps := compose("ps", "--format", "{{.Service}} {{.State}}")
	if ps.Code != 0 || !strings.Contains(ps.Stdout, "web running") || !strings.Contains(ps.Stdout, "client running") {
		t.Errorf("compose ps: %+v, want web and client running", ps)
	}
	eventually(t, "the client reaches the web service by name", func() string {
		logs := compose("logs", "--no-log-prefix", "client")
		if !strings.Contains(logs.Stdout, "hello-from-web\nclient-done") {
			return "client logs: " + logs.Stdout + logs.Stderr
		}
		return ""
	})
	port := strings.TrimSpace(compose("port", "web", "80").Stdout)
	if !strings.HasPrefix(port, "127.0.0.1:") {
		t.Fatalf("compose port web 80 = %q", port)
	}
	if body, err := httpGet("http://" + port + "/"); err != nil || body != "hello-from-web\n" {
		t.Errorf("GET the published port: %q, %v", body, err)
	}
	if logs := compose("logs", "web"); !strings.Contains(logs.Stdout, "web-1") {
		t.Errorf("compose logs web: %+v", logs)
	}

	if b, err := os.ReadFile(filepath.Join(hostData, "out")); err != nil || string(b) != "from-compose\n" {
		t.Errorf("the bind volume's host directory holds %q, %v; want what the client wrote", b, err)
	}

	if r := compose("down", "-v", "--timeout", "1"); r.Code != 0 {
		t.Fatalf("compose down -v: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(hostData, "out")); err != nil {
		t.Errorf("down -v took the bind volume's host files: %v", err)
	}
	label := "label=com.docker.compose.project=" + project
	if got := mustDocker(t, "ps", "-aq", "--filter", label); got != "" {
		t.Errorf("containers left after down: %q", got)
	}
	if got := mustDocker(t, "network", "ls", "-q", "--filter", label); got != "" {
		t.Errorf("networks left after down: %q", got)
	}
	if got := mustDocker(t, "volume", "ls", "-q", "--filter", label); got != "" {
		t.Errorf("volumes left after down -v: %q", got)
	}
	if left := sharesLeft(t); len(left) > 0 {
		t.Errorf("virtiofsd left after down: %q", left)
	}
}

// TestComposeBuild: `docker compose build` goes through buildx's docker
// driver, which reaches the daemon's BuildKit on /grpc and /session (not
// POST /build): a multi-stage Dockerfile outside its context, a target, a
// build arg, a .dockerignore, a rebuild from the cache and a failing RUN.
// Steps run with no network, which the reference dockerd (no bridge) can
// give them.
func TestComposeBuild(t *testing.T) {
	requireSuite(t)
	composePlugin(t)
	img := pulled(t, testimages.Busybox)
	project := strings.ReplaceAll(namePrefix(t), "-", "")
	dir := writeContext(t, map[string]string{
		"ctx/keep.txt":      "kept\n",
		"ctx/secret.txt":    "ignored\n",
		"ctx/sub/f":         "sub\n",
		"ctx/.dockerignore": "secret.txt\n",
		"df/Build.df": "FROM " + img + " AS base\nRUN echo base > /base\n" +
			"FROM base AS final\nCOPY . /ctx/\nARG GREETING=none\nRUN echo \"$GREETING\" > /greeting\n" +
			"CMD [\"sh\", \"-c\", \"ls -A /ctx | tr '\\\\n' ' '; cat /base /greeting\"]\n" +
			"FROM final AS failing\nRUN echo about to fail; exit 3\n",
	})
	okImage, badImage := project+"-ok", project+"-bad"
	spec := `services:
  ok:
    image: ` + okImage + `
    build: {context: ./ctx, dockerfile: ../df/Build.df, target: final, args: {GREETING: hello-buildkit}, network: none}
  bad:
    image: ` + badImage + `
    build: {context: ./ctx, dockerfile: ../df/Build.df, target: failing, network: none}
`
	file := filepath.Join(dir, "compose.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	compose := func(args ...string) result {
		return docker(t, append([]string{"compose", "-p", project, "-f", file, "--progress", "plain"}, args...)...)
	}
	t.Cleanup(func() { docker(t, "rmi", "-f", okImage, badImage) })

	r := compose("build", "ok")
	if r.Code != 0 {
		t.Fatalf("compose build ok: %+v", r)
	}
	if strings.Contains(r.Stdout+r.Stderr, "docker-container driver") {
		t.Errorf("compose did not find the daemon's BuildKit:\n%s", r.Stderr)
	}
	if got := mustDocker(t, "run", "--rm", "--network", "none", okImage); got != ".dockerignore keep.txt sub base\nhello-buildkit\n" {
		t.Errorf("the built image printed %q", got)
	}
	labels := mustDocker(t, "image", "inspect", "--format", "{{index .Config.Labels \"com.docker.compose.service\"}}", okImage)
	if labels != "ok\n" {
		t.Errorf("compose's service label = %q", labels)
	}

	if r := compose("build", "ok"); r.Code != 0 || !strings.Contains(r.Stdout+r.Stderr, "CACHED") {
		t.Errorf("rebuild: %+v, want steps from the cache", r)
	}

	r = compose("build", "bad")
	out := r.Stdout + r.Stderr
	if r.Code == 0 || !strings.Contains(out, "about to fail") || !strings.Contains(out, "exit code: 3") {
		t.Errorf("failing build: %+v, want its output and exit code 3", r)
	}
	if docker(t, "image", "inspect", badImage).Code == 0 {
		t.Errorf("the failed build left an image %s", badImage)
	}
}
