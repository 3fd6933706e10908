package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/runtime/containers"
	"github.com/husk-vm/husk/runtime/vmm/qemu"
)

// TestBenchRunOverVMMFloor is `make bench`'s first scenario, not a timed
// test: it measures `docker run --rm IMG true` through huskd and a raw VMM
// start of the same kernel, initramfs and memory to agent-ready (the floor),
// alternating so both see the same machine, and reports medians. It asserts
// only that every run succeeds.
func TestBenchRunOverVMMFloor(t *testing.T) {
	s := requireSuite(t)
	if os.Getenv("HUSK_E2E_BENCH") != "1" || s.Kind != "huskd" {
		t.Skip("benchmark: run with `make bench` (HUSK_E2E_BENCH=1, huskd)")
	}
	binDir := os.Getenv(binDirEnv)
	if binDir == "" {
		t.Fatalf("%s must name the bin dir holding husk-agent", binDirEnv)
	}
	runs := 10
	if n, err := strconv.Atoi(os.Getenv("HUSK_BENCH_RUNS")); err == nil && n > 0 {
		runs = n
	}
	ctx := context.Background()
	k, err := kernel.Find("")
	if err != nil {
		t.Fatal(err)
	}
	initramfs, err := kernel.BuildInitramfs(ctx, k, filepath.Join(binDir, "husk-agent"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The daemon under test runs with these defaults (256 MiB, 1 vCPU, TCG).
	guest := containers.Guest{Driver: qemu.New(qemu.Options{}), Kernel: k.Path, Initramfs: initramfs, MemoryMiB: 256, CPUs: 1}
	img := pulled(t, testimages.Busybox)

	floor := func() error {
		bctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return guest.BootToReady(bctx, "tcg")
	}
	run := func() error {
		cmd := exec.CommandContext(ctx, s.DockerCLI, "run", "--rm", img, "true")
		cmd.Env = dockerEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("docker run: %v: %s", err, out)
		}
		return nil
	}
	timed := func(f func() error) time.Duration {
		start := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	timed(floor) // warm-up: page cache, initramfs, base disk
	timed(run)
	var floors, runsD []time.Duration
	for range runs {
		floors = append(floors, timed(floor))
		runsD = append(runsD, timed(run))
	}
	report := func(name string, d []time.Duration) time.Duration {
		slices.Sort(d)
		med := d[len(d)/2]
		if len(d)%2 == 0 {
			med = (d[len(d)/2-1] + d[len(d)/2]) / 2
		}
		t.Logf("%-44s median %7.3fs  min %7.3fs  max %7.3fs  (n=%d)", name, med.Seconds(), d[0].Seconds(), d[len(d)-1].Seconds(), len(d))
		return med
	}
	f := report("raw QEMU boot to agent-ready (floor)", floors)
	r := report("docker run --rm busybox true via huskd", runsD)
	t.Logf("run_cold_over_vmm_floor = %.3f", r.Seconds()/f.Seconds())
}
