package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/harness"
)

// dockerdLock serialises runs of Debian's dockerd on this machine: two at
// once may collide on containerd's defaults.
const dockerdLock = "/tmp/husk-dockerd.lock"

// benchBuild is `make bench`'s build scenario: the same 5-RUN Dockerfile
// built with --no-cache through huskd (every RUN in a build VM) and, when
// it runs, through Debian's dockerd with its classic builder, alternating
// so both see the same machine. It asserts only that every build succeeds.
func benchBuild(t *testing.T, b *benchResults, img string, ref *referenceDockerd, runs int) {
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM " + img + `
RUN echo one > /one
RUN mkdir -p /data && echo two > /data/two
RUN rm /bin/vi
RUN for i in 1 2 3 4 5 6 7 8; do echo $i >> /data/list; done
RUN cat /one /data/two /data/list > /all
`})
	build := func(host string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, suite.DockerCLI, "--host", host, "build", "--no-cache", "-q", dir)
		cmd.Env = append(dockerEnv(), "DOCKER_BUILDKIT=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("docker build via %s: %v: %s", host, err, out)
		}
		return nil
	}
	husk := func() error { return build(suite.DockerHost) }
	var peer func() error
	if ref != nil {
		peer = func() error { return build(ref.host) }
	}
	b.alternate(t, runs, benchScenario{"build_5run_husk", "docker build (5 RUNs, --no-cache) via huskd", husk},
		benchScenario{"build_5run_dockerd", "docker build (5 RUNs, --no-cache) via dockerd", peer})
	b.ratio("build_5run_husk_over_dockerd", "build_5run_husk", "build_5run_dockerd")
}

// referenceDockerd is Debian's dockerd started for the bench, with a
// registry of its own in its namespace.
type referenceDockerd struct {
	host     string
	ns       *harness.Netns
	registry *harness.Registry
}

// startReferenceDockerd starts Debian's dockerd in a namespace of its own
// (holding the machine-wide dockerd lock while it runs) beside a registry,
// loads img into it from the daemon under test, and returns it.
// Everything is torn down when t ends.
func startReferenceDockerd(t *testing.T, img string) *referenceDockerd {
	t.Helper()
	lock, err := os.OpenFile(dockerdLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("open %s: %v", dockerdLock, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		t.Fatalf("lock %s: %v", dockerdLock, err)
	}
	t.Cleanup(func() { lock.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), daemonTimeout)
	defer cancel()
	ns, err := harness.NewNetns(ctx, fmt.Sprintf("husk-bench-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
		defer cancel()
		if err := ns.Close(cctx); err != nil {
			t.Errorf("remove bench namespace: %v", err)
		}
	})
	// A short directory: the socket path must stay under 108 bytes.
	tmp, err := os.MkdirTemp("/tmp", "husk-bench-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	d, err := harness.StartDaemon(ctx, ns, harness.DaemonConfig{
		Kind: harness.Dockerd, Dir: filepath.Join(tmp, "dockerd"), DockerCLI: suite.DockerCLI,
		// As huskd's containers, dockerd's get a network by default: the
		// peer of `docker run` must do the same work.
		DefaultBridge: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
		defer cancel()
		if err := d.Stop(cctx); err != nil {
			t.Errorf("stop reference dockerd: %v", err)
		}
		left, _ := d.Leftovers()
		for _, p := range left {
			t.Errorf("reference dockerd left pid %d: %s", p.PID, p.Cmdline)
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	})

	save := exec.CommandContext(ctx, suite.DockerCLI, "save", img)
	save.Env = dockerEnv()
	load := exec.CommandContext(ctx, suite.DockerCLI, "--host", d.Host(), "load")
	load.Env = dockerEnv()
	pipe, err := save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	load.Stdin = pipe
	var loadOut strings.Builder
	load.Stdout, load.Stderr = &loadOut, &loadOut
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	loadErr := load.Run()
	saveErr := save.Wait()
	if loadErr != nil || saveErr != nil {
		t.Fatalf("copy %s to the reference dockerd: save %v, load %v: %s", img, saveErr, loadErr, loadOut.String())
	}
	if err := os.Mkdir(filepath.Join(tmp, "registry"), 0o755); err != nil {
		t.Fatal(err)
	}
	reg, err := harness.StartRegistry(ctx, ns, filepath.Join(tmp, "registry"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
		defer cancel()
		if err := reg.Close(cctx); err != nil {
			t.Errorf("stop the reference registry: %v", err)
		}
	})
	return &referenceDockerd{host: d.Host(), ns: ns, registry: reg}
}
