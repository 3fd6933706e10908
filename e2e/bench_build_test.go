package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
)

// dockerdLock serialises runs of Debian's dockerd on this machine: two at
// once may collide on containerd's defaults.
const dockerdLock = "/tmp/husk-dockerd.lock"

// TestBenchBuildFiveRuns is `make bench`'s build scenario, not a timed
// test: it builds the same 5-RUN Dockerfile with --no-cache through huskd
// (every RUN in a build VM) and through Debian's dockerd with its classic
// builder, alternating so both see the same machine, and reports the
// medians and their ratio. dockerd runs in a network namespace this test
// creates, and gets the base image by `docker save | docker load` from
// huskd. It asserts only that every build succeeds.
func TestBenchBuildFiveRuns(t *testing.T) {
	s := requireSuite(t)
	if os.Getenv("HUSK_E2E_BENCH") != "1" || s.Kind != "huskd" {
		t.Skip("benchmark: run with `make bench` (HUSK_E2E_BENCH=1, huskd)")
	}
	runs := 5
	if n, err := strconv.Atoi(os.Getenv("HUSK_BENCH_RUNS")); err == nil && n > 0 {
		runs = n
	}
	img := pulled(t, testimages.Busybox)
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM " + img + `
RUN echo one > /one
RUN mkdir -p /data && echo two > /data/two
RUN rm /bin/vi
RUN for i in 1 2 3 4 5 6 7 8; do echo $i >> /data/list; done
RUN cat /one /data/two /data/list > /all
`})
	huskHost := s.DockerHost

	var dockerdHost string
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Logf("dockerd not installed: measuring huskd alone (%v)", err)
	} else {
		dockerdHost = startReferenceDockerd(t, img)
	}

	build := func(host string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, s.DockerCLI, "--host", host, "build", "--no-cache", "-q", dir)
		cmd.Env = append(dockerEnv(), "DOCKER_BUILDKIT=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("docker build via %s: %v: %s", host, err, out)
		}
		return nil
	}
	timed := func(host string) time.Duration {
		start := time.Now()
		if err := build(host); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	// Warm-up: base disks, page cache, the CLI.
	timed(huskHost)
	if dockerdHost != "" {
		timed(dockerdHost)
	}
	var husk, ref []time.Duration
	for range runs {
		husk = append(husk, timed(huskHost))
		if dockerdHost != "" {
			ref = append(ref, timed(dockerdHost))
		}
	}
	h := reportMedian(t, "docker build (5 RUNs, --no-cache) via huskd", husk)
	if dockerdHost != "" {
		d := reportMedian(t, "docker build (5 RUNs, --no-cache) via dockerd", ref)
		t.Logf("build_5run_husk_over_dockerd = %.3f", h.Seconds()/d.Seconds())
	}
}

func reportMedian(t *testing.T, name string, d []time.Duration) time.Duration {
	slices.Sort(d)
	med := d[len(d)/2]
	if len(d)%2 == 0 {
		med = (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	t.Logf("%-48s median %7.3fs  min %7.3fs  max %7.3fs  (n=%d)", name, med.Seconds(), d[0].Seconds(), d[len(d)-1].Seconds(), len(d))
	return med
}

// startReferenceDockerd starts Debian's dockerd in a namespace of its own
// (holding the machine-wide dockerd lock while it runs), loads img into it
// from the daemon under test, and returns its DOCKER_HOST. Everything is
// torn down when t ends.
func startReferenceDockerd(t *testing.T, img string) string {
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
	d, err := harness.StartDaemon(ctx, ns, harness.DaemonConfig{Kind: harness.Dockerd, Dir: filepath.Join(tmp, "dockerd"), DockerCLI: suite.DockerCLI})
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
	return d.Host()
}
