package e2e

import (
	"fmt"
	"testing"
	"time"
)

// benchPool measures `docker run --rm IMG true` taking a VM from huskd's
// pool (--pool-size 1), alternated with dockerd + runc. The daemon is
// restarted with the pool for this and without it afterwards. After each
// run, untimed, the pool is let refill, so that every measured run takes
// a pooled VM (the daemon log must say so for each).
func benchPool(t *testing.T, b *benchResults, img string, ref *referenceDockerd, runs int) {
	ready := poolReady()
	const taken = "container VM taken from the pool"
	readyBefore := logCount(t, ready)
	if err := control.do("restart-with --pool-size 1"); err != nil {
		t.Fatalf("restart huskd with --pool-size 1: %v", err)
	}
	defer func() {
		if err := control.do("restart-with"); err != nil {
			t.Fatalf("restart huskd without a pool: %v", err)
		}
	}()
	made := 0
	refilled := func() error {
		made++
		deadline := time.Now().Add(2 * time.Minute)
		for logCount(t, ready)-readyBefore < made {
			if time.Now().After(deadline) {
				return fmt.Errorf("the pool did not refill (%d VMs made, want %d)", logCount(t, ready)-readyBefore, made)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}
	if err := refilled(); err != nil {
		t.Fatal(err)
	}
	takenBefore := logCount(t, taken)
	scs := []timedScenario{{benchScenario: benchScenario{"run_pool", "docker run --rm true, from the pool (huskd --pool-size 1)", benchDockerRun(suite.DockerHost, img, "true")}, after: refilled}}
	if ref != nil {
		scs = append(scs, timedScenario{benchScenario: benchScenario{"run_runc", "docker run --rm true (dockerd + runc)", benchDockerRun(ref.host, img, "true")}})
	}
	b.alternateTimed(t, runs, scs)
	if got, want := logCount(t, taken)-takenBefore, runs+1; got != want {
		t.Errorf("%d of the %d pool runs (with the warm-up) took a pooled VM", got, want)
	}
	b.ratio("run_pool_over_runc", "run_pool", "run_runc")
	b.ratio("run_pool_over_run_template", "run_pool", "run_template")
}
