package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/husk-vm/husk/e2e/testimages"
	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/runtime/containers"
	"github.com/husk-vm/husk/runtime/vmm/qemu"
)

// Environment of `make bench`.
const (
	benchEnv     = "HUSK_E2E_BENCH"  // "1" runs TestBench
	benchRunsEnv = "HUSK_BENCH_RUNS" // measured runs per scenario (default 7)
	benchOutEnv  = "HUSK_BENCH_OUT"  // where results.json and the plot go (default ../bench)
	// benchMinKernelEnv names a minimal guest kernel (make kernel) whose
	// boot is compared with the distribution's.
	benchMinKernelEnv = "HUSK_BENCH_KERNEL"
	// benchMinQEMUEnv names a QEMU built by `make qemu`, whose starts and
	// memory are compared with Debian's.
	benchMinQEMUEnv = "HUSK_BENCH_QEMU"
)

// TestBench is `make bench`: side-by-side measurements of husk against
// the VMM's own floor and against Debian's dockerd + runc, each scenario
// run several times after a warm-up, alternating with its peer so both see
// the same machine. It prints a table of medians with min and max and
// writes results.json and a latency plot. A benchmark reports; it asserts
// only that every measured operation succeeds, never how long it took.
func TestBench(t *testing.T) {
	s := requireSuite(t)
	if os.Getenv(benchEnv) != "1" || s.Kind != "huskd" {
		t.Skip("benchmark: run with `make bench` (HUSK_E2E_BENCH=1, huskd)")
	}
	binDir := os.Getenv(binDirEnv)
	if binDir == "" {
		t.Fatalf("%s must name the bin dir holding husk-agent", binDirEnv)
	}
	runs := 7
	if n, err := strconv.Atoi(os.Getenv(benchRunsEnv)); err == nil && n > 0 {
		runs = n
	}
	out := os.Getenv(benchOutEnv)
	if out == "" {
		out = filepath.Join("..", "bench")
	}
	b := newBenchResults()
	b.machine["load_at_start"] = loadAverage()
	img := pulled(t, testimages.Busybox)
	waitTemplate(t)
	// The template path of a `docker run` is the image's template once
	// one container of the image has started.
	waitImageTemplate(t, img, 0)

	var ref *referenceDockerd
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Logf("dockerd not installed: measuring huskd alone (%v)", err)
	} else {
		ref = startReferenceDockerd(t, img)
	}

	benchRun(t, b, binDir, img, ref, runs)
	benchPool(t, b, img, ref, runs)
	benchMinimalKernelTemplate(t, b, img, ref, runs)
	benchMinimalQEMU(t, b, binDir, img, ref, runs)
	benchFirstExec(t, b, img, runs)
	benchMemory(t, b, img)
	benchConcurrent(t, b, img, max(runs/2, 2))
	benchFork(t, b, img, runs)
	benchBuild(t, b, img, ref, max(runs/2, 2))
	benchPull(t, b, ref, max(runs/2, 2))

	b.machine["load_at_end"] = loadAverage()
	b.machine["runs"] = runs
	b.printTable(t)
	if err := b.write(out); err != nil {
		t.Fatal(err)
	}
	t.Logf("bench: wrote %s and %s", filepath.Join(out, "results.json"), filepath.Join(out, "latency.png"))
}

// benchRun measures `docker run --rm IMG true`: booted cold, from a
// template, and through dockerd + runc, against the floor: a raw VMM
// start of the same kernel, initramfs, command line and memory to
// agent-ready.
func benchRun(t *testing.T, b *benchResults, binDir, img string, ref *referenceDockerd, runs int) {
	ctx := context.Background()
	guest, k, version := benchGuest(t, binDir, "")
	b.machine["qemu"] = version
	b.machine["accel"] = "tcg"
	b.machine["guest_kernel"] = k.Version
	b.machine["guest_cpus"] = containers.DefaultCPUs()
	// And without huge pages, as huskd's QEMUs run under TCG.
	if err := qemu.NoHugePagesUnderTCG("tcg"); err != nil {
		t.Fatal(err)
	}
	floor := func() error {
		bctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return guest.BootToReady(bctx, "tcg")
	}
	// Both daemons give a container a network by default (huskd a TAP on
	// its bridge, dockerd a veth on docker0); --network none leaves it
	// out on both sides.
	var runc, runcNone func() error
	if ref != nil {
		runc = benchDockerRun(ref.host, img, "true")
		runcNone = benchDockerRun(ref.host, "--network", "none", img, "true")
	}
	scs := []benchScenario{
		{"vmm_floor", "raw QEMU boot to agent-ready (floor)", floor},
		{"run_cold", "docker run --rm true, cold boot (huskd)", benchDockerRun(suite.DockerHost, "--label", containers.BootLabel+"=cold", img, "true")},
		{"run_template", "docker run --rm true, from template (huskd)", benchDockerRun(suite.DockerHost, img, "true")},
		{"run_shape_template", "docker run --rm true, from the shape's template, not the image's (huskd)", benchDockerRun(suite.DockerHost, "--label", containers.BootLabel+"=shape", img, "true")},
		{"run_runc", "docker run --rm true (dockerd + runc)", runc},
		{"run_template_nonet", "docker run --rm --network none true, from template (huskd)", benchDockerRun(suite.DockerHost, "--network", "none", img, "true")},
		{"run_runc_nonet", "docker run --rm --network none true (dockerd + runc)", runcNone},
	}
	if p := os.Getenv(benchMinKernelEnv); p != "" {
		mk, err := kernel.Find(p)
		if err != nil {
			t.Fatalf("%s=%s: %v", benchMinKernelEnv, p, err)
		}
		mi, err := kernel.BuildInitramfs(ctx, mk, filepath.Join(binDir, "husk-agent"), filepath.Join(binDir, "husk-init"), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		minimal := guest
		minimal.Kernel, minimal.Initramfs = mk.Path, mi
		scs = append(scs, benchScenario{"vmm_floor_minimal_kernel", "raw QEMU boot to agent-ready, minimal kernel", func() error {
			bctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			return minimal.BootToReady(bctx, "tcg")
		}})
	} else {
		b.notes = append(b.notes, "no minimal kernel compared: build one with `make kernel` and set "+benchMinKernelEnv)
	}
	// The image's template without a NIC, as the one with (TestBench),
	// is made before the warm-up: otherwise the warm-up's start makes
	// only the shape's, and the first measured round's makes the image's,
	// in the background of the runs after it.
	waitShapeTemplates(t, img, 0, "--network", "none")
	b.alternate(t, runs, scs...)
	b.ratio("run_cold_over_vmm_floor", "run_cold", "vmm_floor")
	b.ratio("run_template_over_runc", "run_template", "run_runc")
	b.ratio("run_shape_template_over_runc", "run_shape_template", "run_runc")
	b.ratio("run_template_over_run_shape_template", "run_template", "run_shape_template")
	b.ratio("run_template_over_run_cold", "run_template", "run_cold")
	b.ratio("run_template_over_runc_nonet", "run_template_nonet", "run_runc_nonet")
	if _, ok := b.samples["vmm_floor_minimal_kernel"]; ok {
		b.ratio("minimal_kernel_floor_over_debian_floor", "vmm_floor_minimal_kernel", "vmm_floor")
	}
}

// benchGuest is a guest as the daemon under test runs its guests, for
// raw boots: Debian's kernel and husk's initramfs, 256 MiB, its default
// vCPUs (huskd's --cpus is not set), and no husk.debug on the command
// line (the bench's huskd runs without --debug,
// harness.DaemonConfig.Quiet). It is booted by the QEMU binary ("" is the
// one in PATH), through the kernel's PVH entry where it has one, as the
// daemon boots kernels. It returns the kernel and the QEMU's version too.
func benchGuest(t *testing.T, binDir, binary string) (containers.Guest, kernel.Kernel, string) {
	ctx := context.Background()
	k, err := kernel.Find("")
	if err != nil {
		t.Fatal(err)
	}
	initramfs, err := kernel.BuildInitramfs(ctx, k, filepath.Join(binDir, "husk-agent"), filepath.Join(binDir, "husk-init"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	drv := qemu.New(qemu.Options{Binary: binary, KernelCache: t.TempDir()})
	version, err := drv.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return containers.Guest{Driver: drv, Kernel: k.Path, Initramfs: initramfs, MemoryMiB: 256, CPUs: containers.DefaultCPUs()}, k, version
}

// templatesMade counts huskd's "template ready" and "image template
// ready" lines so far.
func templatesMade(t *testing.T) int {
	return logCount(t, `template ready" memory_mib=`)
}

// waitShapeTemplates brings a shape of VM (256 MiB, the default vCPUs,
// nics NICs) to where a `docker run --rm ARGS IMG true` starts from the
// image's template: its first start boots cold and has huskd make the
// shape's template in the background, the next makes the image's.
func waitShapeTemplates(t *testing.T, img string, nics int, args ...string) {
	t.Helper()
	id := imageHex(t, img)
	shape := shapeFields(nics)
	run := append(append([]string{"run", "--rm"}, args...), img, "true")
	for _, step := range []struct{ what, line, id string }{
		{"the template of " + shape, `msg="template ready" ` + shape, ""},
		{"the image template of " + img + ", " + shape, `msg="image template ready" ` + shape, id},
	} {
		if logCount(t, step.line, step.id) > 0 {
			continue
		}
		mustDocker(t, run...)
		eventually(t, step.what+" is ready", func() string {
			if logCount(t, step.line, step.id) == 0 {
				return "no " + step.line + " line in " + suite.DaemonLog
			}
			return ""
		})
	}
}

// benchDockerRun returns a scenario that runs `docker run --rm ARGS`
// against host.
func benchDockerRun(host string, args ...string) func() error {
	return benchDocker(host, append([]string{"run", "--rm"}, args...)...)
}

// benchDocker returns a scenario that runs `docker ARGS` against host.
func benchDocker(host string, args ...string) func() error {
	return func() error {
		cmd := exec.CommandContext(context.Background(), suite.DockerCLI, append([]string{"--host", host}, args...)...)
		cmd.Env = dockerEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("docker %s via %s: %v: %s%s", args[0], host, err, out, guestConsoles(string(out)))
		}
		return nil
	}
}

// benchMinimalKernelTemplate measures the template path again with the
// minimal guest kernel (make kernel) in place of Debian's, alternated with
// dockerd + runc: a restored guest's time goes to translating the kernel
// code it runs, and that kernel runs less of it. The daemon is restarted
// with --kernel for this and without it afterwards.
func benchMinimalKernelTemplate(t *testing.T, b *benchResults, img string, ref *referenceDockerd, runs int) {
	p := os.Getenv(benchMinKernelEnv)
	if p == "" {
		return
	}
	mk, err := kernel.Find(p)
	if err != nil {
		t.Fatalf("%s=%s: %v", benchMinKernelEnv, p, err)
	}
	// A daemon of another kernel removes the other's template and builds
	// its own, and containers boot cold until it is ready: each restart
	// waits for its new template.
	restart := func(args, what string) {
		before, beforeImage := logCount(t, templateReady()), imageTemplatesReady(t, img)
		if err := control.do("restart-with" + args); err != nil {
			t.Fatalf("restart huskd with %s: %v", what, err)
		}
		eventually(t, what+"'s template is ready", func() string {
			if logCount(t, templateReady()) == before {
				return "no new \"template ready\" line in " + suite.DaemonLog
			}
			return ""
		})
		waitImageTemplate(t, img, beforeImage)
	}
	restart(" --kernel "+p, "the minimal kernel")
	defer restart("", "the default kernel")
	if r := docker(t, "run", "--rm", img, "uname", "-r"); r.Code != 0 || strings.TrimSpace(r.Stdout) != mk.Version {
		t.Fatalf("uname -r in a guest: exit %d, %q (%s); want the minimal kernel's %q", r.Code, r.Stdout, r.Stderr, mk.Version)
	}
	scs := []benchScenario{{"run_template_minimal_kernel", "docker run --rm true, from template, minimal kernel (huskd --kernel)", benchDockerRun(suite.DockerHost, img, "true")}}
	if ref != nil {
		scs = append(scs, benchScenario{"run_runc", "docker run --rm true (dockerd + runc)", benchDockerRun(ref.host, img, "true")})
	}
	b.alternate(t, runs, scs...)
	// No ratio to run_template: that row is of an earlier phase, and on a
	// noisy host the guest's speed drifts between phases more than a
	// kernel moves it (one run gave the minimal kernel 1.10x the default
	// kernel's time across phases where 15 interleaved starts gave 0.86x).
	b.ratio("run_template_minimal_kernel_over_runc", "run_template_minimal_kernel", "run_runc")
}

// benchMinimalQEMU measures a start from the image's template, a cold
// start and its floor (a raw boot with the same binary), and a
// template-started sandbox's memory, with the QEMU `make qemu` builds in
// place of Debian's; the starts alternate with dockerd + runc. The daemon
// is restarted with --qemu for this and without it afterwards. Both
// binaries are the same QEMU version with the same devices, so the
// daemon keeps its templates, and the new binary restores them.
func benchMinimalQEMU(t *testing.T, b *benchResults, binDir, img string, ref *referenceDockerd, runs int) {
	p := os.Getenv(benchMinQEMUEnv)
	if p == "" {
		b.notes = append(b.notes, "no minimal QEMU compared: build one with `make qemu` and set "+benchMinQEMUEnv)
		return
	}
	want, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatalf("%s=%s: %v", benchMinQEMUEnv, p, err)
	}
	ctx := context.Background()
	guest, _, version := benchGuest(t, binDir, p)
	b.machine["qemu_minimal"] = version + ", " + p

	if err := control.do("restart-with --qemu " + p); err != nil {
		t.Fatalf("restart huskd with --qemu %s: %v", p, err)
	}
	defer func() {
		if err := control.do("restart-with"); err != nil {
			t.Fatalf("restart huskd with Debian's QEMU: %v", err)
		}
	}()
	// The memory row also proves the daemon runs the binary.
	if exe := benchSandboxMemory(t, b, img, "template_minimal_qemu", afterStart); exe != want {
		t.Fatalf("a sandbox's VMM is %s; want %s", exe, want)
	}
	// Only this QEMU can give back an idle VM's translated code. A
	// sandbox in use then holds what its execs translate again.
	benchSandboxMemory(t, b, img, "template_minimal_qemu_idle", onceReleased)
	benchSandboxMemory(t, b, img, "template_minimal_qemu_exec", releasedThenExec)
	// Nor can any other give back a cold boot's kernel and initramfs.
	benchSandboxMemory(t, b, img, "cold_minimal_qemu", afterStart, "--label", containers.BootLabel+"=cold")
	scs := []benchScenario{
		{"vmm_floor_minimal_qemu", "raw QEMU boot to agent-ready (floor), minimal QEMU", func() error {
			bctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			return guest.BootToReady(bctx, "tcg")
		}},
		{"run_cold_minimal_qemu", "docker run --rm true, cold boot, minimal QEMU (huskd --qemu)", benchDockerRun(suite.DockerHost, "--label", containers.BootLabel+"=cold", img, "true")},
		{"run_template_minimal_qemu", "docker run --rm true, from template, minimal QEMU (huskd --qemu)", benchDockerRun(suite.DockerHost, img, "true")},
	}
	if ref != nil {
		scs = append(scs, benchScenario{"run_runc", "docker run --rm true (dockerd + runc)", benchDockerRun(ref.host, img, "true")})
	}
	b.alternate(t, runs, scs...)
	// As for the minimal kernel, no ratio to the rows of Debian's QEMU,
	// which are of an earlier phase.
	b.ratio("run_cold_minimal_qemu_over_vmm_floor_minimal_qemu", "run_cold_minimal_qemu", "vmm_floor_minimal_qemu")
	b.ratio("run_template_minimal_qemu_over_runc", "run_template_minimal_qemu", "run_runc")
	benchExecAfterRelease(t, b, img, runs)
}

// benchExecAfterRelease measures what a release of translated code costs
// the exec after it: `docker exec ID true` into a running sandbox right
// after its QEMU dropped its code, against the same exec warm. Between
// rounds the bench sends the release itself rather than waiting a
// minute for huskd's idle watcher to.
func benchExecAfterRelease(t *testing.T, b *benchResults, img string, runs int) {
	name := containerName(t, "-exec-release")
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img, "sleep", "600"))
	defer mustDocker(t, "rm", "-f", name)
	dockerExec := benchDocker(suite.DockerHost, "exec", name, "true")
	release := func() error { return releaseTranslations(context.Background(), suite.DaemonRoot, id) }
	b.alternateTimed(t, runs, []timedScenario{
		{benchScenario{"exec_after_release_minimal_qemu", "docker exec true, first after a release of translated code, minimal QEMU", dockerExec}, nil},
		{benchScenario{"exec_warm_minimal_qemu", "docker exec true, the next one, minimal QEMU", dockerExec}, release},
	})
	b.ratio("exec_after_release_over_exec_warm_minimal_qemu", "exec_after_release_minimal_qemu", "exec_warm_minimal_qemu")
}

// firstExecLoop prints a line every 20 ms: its first output after a start
// is the first successful command in the guest.
var firstExecLoop = []string{"sh", "-c", "while :; do echo tick; usleep 20000; done"}

// benchFirstExec measures, after a cold boot, a template start and a
// checkpoint restore (whose process was already running and only has to
// be resumed), from the start request to two things: the first byte of
// the container's output on an attach stream opened before it, and the
// end of a first `docker exec ID true` that exits 0 (created, started
// attached and inspected as the CLI does it).
func benchFirstExec(t *testing.T, b *benchResults, img string, runs int) {
	ctx := context.Background()
	cli, err := client.New(client.WithHost(suite.DockerHost))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	create := func(suffix string, labels map[string]string) string {
		name := containerName(t, suffix)
		r, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name: name, Config: &container.Config{Image: img, Cmd: firstExecLoop, Labels: labels},
		})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	stop := func(id string) error {
		if _, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{}); err != nil {
			return err
		}
		w := cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		select {
		case <-w.Result:
			return nil
		case err := <-w.Error:
			return err
		}
	}
	firstOutput := func(id, checkpoint string) func() error {
		return func() error {
			att, err := cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdout: true})
			if err != nil {
				return err
			}
			defer att.Close()
			got := make(chan error, 1)
			go func() {
				_, err := att.Reader.ReadByte()
				got <- err
			}()
			if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{CheckpointID: checkpoint}); err != nil {
				return err
			}
			if err := <-got; err != nil && err != io.EOF {
				return fmt.Errorf("first output of %s: %w", id, err)
			}
			return nil
		}
	}
	firstExec := func(id, checkpoint string) func() error {
		return func() error {
			if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{CheckpointID: checkpoint}); err != nil {
				return err
			}
			return execTrue(ctx, cli, id)
		}
	}
	cold := create("-fe-cold", map[string]string{containers.BootLabel: "cold"})
	tpl := create("-fe-template", nil)
	ck := create("-fe-restore", nil)
	if err := firstOutput(ck, "")(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.CheckpointCreate(ctx, ck, client.CheckpointCreateOptions{CheckpointID: "bench", Exit: true}); err != nil {
		t.Fatal(err)
	}
	// Each measured start is followed by a kill, outside the timing.
	b.alternateTimed(t, runs, []timedScenario{
		{benchScenario{"first_output_cold", "start to first output, cold boot", firstOutput(cold, "")}, stopAfter(stop, cold)},
		{benchScenario{"first_output_template", "start to first output, from template", firstOutput(tpl, "")}, stopAfter(stop, tpl)},
		{benchScenario{"first_output_restore", "start to first output, checkpoint restore", firstOutput(ck, "bench")}, stopAfter(stop, ck)},
		{benchScenario{"first_exec_cold", "start to first docker exec, cold boot", firstExec(cold, "")}, stopAfter(stop, cold)},
		{benchScenario{"first_exec_template", "start to first docker exec, from template", firstExec(tpl, "")}, stopAfter(stop, tpl)},
		{benchScenario{"first_exec_restore", "start to first docker exec, checkpoint restore", firstExec(ck, "bench")}, stopAfter(stop, ck)},
	})
	b.ratio("restore_first_exec_over_cold_first_exec", "first_exec_restore", "first_exec_cold")
	b.ratio("template_first_exec_over_cold_first_exec", "first_exec_template", "first_exec_cold")
	b.ratio("restore_first_output_over_cold_first_output", "first_output_restore", "first_output_cold")
}

// execTrue runs `true` in container id as `docker exec` does (create, start
// attached, inspect once the stream ends) and fails unless it exits 0.
func execTrue(ctx context.Context, cli *client.Client, id string) error {
	ex, err := cli.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return fmt.Errorf("exec create in %s: %w", id, err)
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return fmt.Errorf("exec start in %s: %w", id, err)
	}
	_, err = io.Copy(io.Discard, att.Reader)
	att.Close()
	if err != nil {
		return fmt.Errorf("exec output in %s: %w", id, err)
	}
	// The stream ends when the process does; a daemon may record the
	// exit code a moment later, so poll, in steps short enough not to
	// weigh in the timing (eventually's 200 ms would).
	for deadline := time.Now().Add(10 * time.Second); ; {
		ins, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		if err != nil {
			return fmt.Errorf("exec inspect in %s: %w", id, err)
		}
		if !ins.Running {
			if ins.ExitCode != 0 {
				return fmt.Errorf("exec true in %s exited %d", id, ins.ExitCode)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("exec true in %s still running after its stream ended", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func stopAfter(stop func(string) error, id string) func() error {
	return func() error { return stop(id) }
}

// benchMemory reports each sandbox's host memory beyond its guest's: the
// QEMU process's resident memory minus what is resident of the guest-RAM
// mapping (the pages the guest touched, or a restore wrote).
func benchMemory(t *testing.T, b *benchResults, img string) {
	for _, c := range []struct {
		key    string
		labels []string
	}{
		{"template", nil},
		{"cold", []string{"--label", containers.BootLabel + "=cold"}},
	} {
		benchSandboxMemory(t, b, img, c.key, afterStart, c.labels...)
	}
}

// afterStart lets a sandbox's guest settle after its start-up: 2 s.
func afterStart(*testing.T, string) string {
	time.Sleep(2 * time.Second)
	return "2 s after docker run -d"
}

// onceReleased waits until a sandbox's QEMU, idle, has given back its
// translated code (huskd --tcg-release-idle, by default after a minute).
func onceReleased(t *testing.T, id string) string {
	start := time.Now()
	waitReleased(t, id)
	return fmt.Sprintf("idle, once its QEMU released its translated code (%.0f s after docker run -d returned)", time.Since(start).Seconds())
}

// releasedThenExec has a sandbox's QEMU give back its translated code, as
// an idle one does, then runs one `docker exec ID true` in it: what a
// sandbox in use holds.
func releasedThenExec(t *testing.T, id string) string {
	settled := afterStart(t, id)
	if err := releaseTranslations(context.Background(), suite.DaemonRoot, id); err != nil {
		t.Fatal(err)
	}
	mustDocker(t, "exec", id, "true")
	return settled + ", then a release of its translated code and one docker exec"
}

// benchSandboxMemory records as key the host memory of a sandbox started
// with `docker run -d ARGS IMG sleep 600`, once settle returns, which
// says when that was. It returns the VMM's binary.
func benchSandboxMemory(t *testing.T, b *benchResults, img, key string, settle func(t *testing.T, id string) string, args ...string) string {
	name := containerName(t, "-mem-"+key)
	id := strings.TrimSpace(mustDocker(t, append(append([]string{"run", "-d", "--name", name}, args...), img, "sleep", "600")...))
	defer mustDocker(t, "rm", "-f", name)
	when := settle(t, id)
	pid := vmmPID(t, name)
	exe := vmmBinary(t, name)
	m, err := vmmMemory(pid, 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	m.Measured = when
	if m.TranslatedBlocks, m.TranslationFlushes, err = translatedBlocks(context.Background(), suite.DaemonRoot, id); err != nil {
		b.notes = append(b.notes, fmt.Sprintf("no translated-block count for the %s sandbox: %v", key, err))
	}
	b.memory[key] = m
	t.Logf("bench: sandbox memory (%s, %s): QEMU RSS %.1f MiB, guest RAM resident %.1f MiB, overhead %.1f MiB (PSS-based %.1f MiB) = TCG buffer %.1f + binary and libraries %.1f + private %.1f; %d blocks translated",
		key, exe, m.RSSMiB, m.GuestMiB, m.OverheadMiB, m.OverheadPSSMiB, m.TCGBufferMiB, m.FileMiB, m.PrivateMiB, m.TranslatedBlocks)
	return exe
}

// memoryFigures is one sandbox's host memory, in MiB. The overhead is
// broken down so that what only TCG costs can be told apart: its
// translation buffer, the QEMU binary's and libraries' pages (file-backed,
// shared by every VMM on the host), and the rest, private to this VMM.
type memoryFigures struct {
	RSSMiB         float64 `json:"vmm_rss_mib"`
	PSSMiB         float64 `json:"vmm_pss_mib"`
	GuestMiB       float64 `json:"guest_resident_mib"`
	OverheadMiB    float64 `json:"overhead_rss_mib"`
	OverheadPSSMiB float64 `json:"overhead_pss_mib"`
	TCGBufferMiB   float64 `json:"overhead_tcg_buffer_mib"`
	FileMiB        float64 `json:"overhead_file_backed_mib"`
	PrivateMiB     float64 `json:"overhead_private_mib"`
	// TranslatedBlocks is how many blocks of guest code TCG had
	// translated by then, since its last flush (TranslationFlushes
	// counts them: a restore makes one, a full buffer another).
	TranslatedBlocks   int `json:"tcg_translated_blocks"`
	TranslationFlushes int `json:"tcg_buffer_flushes"`
	// Measured says when, after the sandbox's start.
	Measured string `json:"measured"`
}

// vmmMemory reads /proc/pid/smaps: the guest's RAM is the smallest
// mapping of at least guestBytes (under TCG a larger one holds the
// translated code, which counts as the VMM's own). TCG's translation
// buffer is QEMU's anonymous writable and executable memory: one mapping
// for a one-vCPU guest, and for more, one per region of it that a vCPU
// thread translates into, with guard pages between them.
func vmmMemory(pid int, guestBytes int64) (memoryFigures, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return memoryFigures{}, err
	}
	defer f.Close()
	return parseSmaps(f, guestBytes)
}

// isSmapsHeader says whether the fields of a line of /proc/PID/smaps
// are a mapping's header (address perms offset dev inode [path]) rather
// than one of its "Key: value" lines.
func isSmapsHeader(fields []string) bool {
	return len(fields) >= 5 && !strings.HasSuffix(fields[0], ":") && strings.Contains(fields[0], "-")
}

func parseSmaps(r io.Reader, guestBytes int64) (memoryFigures, error) {
	var total, pss, guestRSS, guestPSS, bestSize, size, rss, tbRSS, fileRSS, guestFile int64
	fileBacked, translated := false, false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		if isSmapsHeader(fields) {
			fileBacked = fields[4] != "0"
			translated = !fileBacked && fields[1] == "rwxp"
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "Size:":
			size = kb << 10
		case "Rss:":
			rss = kb << 10
			total += rss
			if fileBacked {
				fileRSS += rss
			} else if translated {
				tbRSS += rss
			}
		case "Pss:":
			p := kb << 10
			pss += p
			if size >= guestBytes && (bestSize == 0 || size < bestSize) {
				bestSize, guestRSS, guestPSS = size, rss, p
				guestFile = 0
				if fileBacked {
					// A restore maps its template's RAM file.
					guestFile = rss
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return memoryFigures{}, err
	}
	const mib = 1 << 20
	over := total - guestRSS
	file := fileRSS - guestFile
	return memoryFigures{
		RSSMiB: float64(total) / mib, PSSMiB: float64(pss) / mib, GuestMiB: float64(guestRSS) / mib,
		OverheadMiB: float64(over) / mib, OverheadPSSMiB: float64(pss-guestPSS) / mib,
		TCGBufferMiB: float64(tbRSS) / mib, FileMiB: float64(file) / mib, PrivateMiB: float64(over-tbRSS-file) / mib,
	}, nil
}

// benchConcurrent starts ten sandboxes at once (`docker run -d`, which
// returns once the container's process runs) and times until all have.
func benchConcurrent(t *testing.T, b *benchResults, img string, runs int) {
	const n = 10
	start10 := func(labels ...string) func() error {
		return func() error {
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("%s-c10-%d", namePrefix(t), i)
					args := append([]string{"run", "-d", "--name", name}, labels...)
					cmd := exec.Command(suite.DockerCLI, append(args, img, "sleep", "600")...)
					cmd.Env = dockerEnv()
					if out, err := cmd.CombinedOutput(); err != nil {
						errs[i] = fmt.Errorf("%s: %v: %s%s", name, err, out, guestConsoles(string(out)))
					}
				}()
			}
			wg.Wait()
			return joinErrs(errs)
		}
	}
	cleanup := func() error {
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("%s-c10-%d", namePrefix(t), i))
		}
		cmd := exec.Command(suite.DockerCLI, append([]string{"rm", "-f"}, names...)...)
		cmd.Env = dockerEnv()
		_ = cmd.Run()
		return nil
	}
	b.alternateTimed(t, runs, []timedScenario{
		{benchScenario{"start10_template", "10 concurrent docker run -d, from template", start10()}, cleanup},
		{benchScenario{"start10_cold", "10 concurrent docker run -d, cold boot", start10("--label", containers.BootLabel+"=cold")}, cleanup},
	})
}

// benchFork times `docker checkpoint create --leave-running`, as an
// agent's sandbox takes one before each step it may want to undo, and
// `husk fork SRC --checkpoint cp -n 4`: four containers restored at once
// from one checkpoint.
func benchFork(t *testing.T, b *benchResults, img string, runs int) {
	src := containerName(t, "-forksrc")
	mustDocker(t, "run", "-d", "--name", src, img, "sh", "-c", "i=0; while :; do i=$((i+1)); sleep 1; done")
	step := 0
	create := func() error {
		step++
		if r := docker(t, "checkpoint", "create", "--leave-running", src, fmt.Sprintf("step%d", step)); r.Code != 0 {
			return fmt.Errorf("checkpoint create: %+v", r)
		}
		return nil
	}
	remove := func() error {
		docker(t, "checkpoint", "rm", src, fmt.Sprintf("step%d", step))
		return nil
	}
	b.alternateTimed(t, runs, []timedScenario{{benchScenario{"checkpoint_create", "docker checkpoint create --leave-running", create}, remove}})
	mustDocker(t, "checkpoint", "create", src, "bench")
	husk := huskCLI(t)
	var forks []string
	fork := func() error {
		cmd := exec.Command(husk, "fork", src, "--checkpoint", "bench", "-n", "4")
		cmd.Env = dockerEnv()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("husk fork: %v: %s", err, out)
		}
		forks = strings.Fields(string(out))
		return nil
	}
	rm := func() error {
		if len(forks) > 0 {
			cmd := exec.Command(suite.DockerCLI, append([]string{"rm", "-f"}, forks...)...)
			cmd.Env = dockerEnv()
			_ = cmd.Run()
		}
		return nil
	}
	b.alternateTimed(t, runs, []timedScenario{{benchScenario{"fork_4", "husk fork -n 4 (restores at once)", fork}, rm}})
}

func joinErrs(errs []error) error {
	var msgs []string
	for _, e := range errs {
		if e != nil {
			msgs = append(msgs, e.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// benchScenario is one measured operation; a nil run is left out (no peer).
type benchScenario struct {
	key, label string
	run        func() error
}

// timedScenario has an untimed step after each measured run.
type timedScenario struct {
	benchScenario
	after func() error
}

// benchResults collects one invocation's measurements.
type benchResults struct {
	mu      sync.Mutex
	samples map[string][]time.Duration
	labels  map[string]string
	order   []string
	ratios  map[string]float64
	memory  map[string]memoryFigures
	machine map[string]any
	notes   []string
}

func newBenchResults() *benchResults {
	b := &benchResults{samples: map[string][]time.Duration{}, labels: map[string]string{},
		ratios: map[string]float64{}, memory: map[string]memoryFigures{}, machine: map[string]any{}}
	b.machine["cores"] = runtime.NumCPU()
	if mem, err := memTotalMiB(); err == nil {
		b.machine["memory_mib"] = mem
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		b.machine["kernel"] = strings.TrimSpace(string(out))
	}
	return b
}

func memTotalMiB() (int, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.Atoi(f[1])
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}

// alternate runs each scenario once as a warm-up, then runs times in
// turn, so that every scenario sees the same machine.
func (b *benchResults) alternate(t *testing.T, runs int, scs ...benchScenario) {
	var ts []timedScenario
	for _, s := range scs {
		ts = append(ts, timedScenario{benchScenario: s})
	}
	b.alternateTimed(t, runs, ts)
}

func (b *benchResults) alternateTimed(t *testing.T, runs int, scs []timedScenario) {
	t.Helper()
	var made int
	for i := -1; i < runs; i++ {
		if i == 0 {
			made = templatesMade(t)
		}
		for _, s := range scs {
			if s.run == nil {
				continue
			}
			start := time.Now()
			if err := s.run(); err != nil {
				t.Fatalf("%s: %v", s.key, err)
			}
			d := time.Since(start)
			if s.after != nil {
				if err := s.after(); err != nil {
					t.Fatalf("%s: after: %v", s.key, err)
				}
			}
			if i >= 0 { // i == -1 is the warm-up
				b.add(s.key, s.label, d)
			}
		}
	}
	// A template made in the background takes a boot's CPU from the runs
	// beside it; a phase is meant to measure none.
	if n := templatesMade(t) - made; n > 0 {
		var keys []string
		for _, s := range scs {
			keys = append(keys, s.key)
		}
		note := fmt.Sprintf("%d template(s) made during the measured runs of %s", n, strings.Join(keys, ", "))
		t.Log("bench: " + note)
		b.notes = append(b.notes, note)
	}
	for _, s := range scs {
		if s.run != nil {
			st := b.stats(s.key)
			t.Logf("bench: %-48s median %7.3fs  min %7.3fs  max %7.3fs  (n=%d)", b.labels[s.key], st.Median, st.Min, st.Max, st.N)
		}
	}
}

func (b *benchResults) add(key, label string, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.samples[key]; !ok {
		b.order = append(b.order, key)
		b.labels[key] = label
	}
	b.samples[key] = append(b.samples[key], d)
}

// stat is a scenario's summary in seconds.
type stat struct {
	Median  float64   `json:"median_s"`
	Min     float64   `json:"min_s"`
	Max     float64   `json:"max_s"`
	N       int       `json:"n"`
	Samples []float64 `json:"samples_s"`
}

func (b *benchResults) stats(key string) stat {
	b.mu.Lock()
	d := slices.Clone(b.samples[key])
	b.mu.Unlock()
	if len(d) == 0 {
		return stat{}
	}
	var samples []float64
	for _, x := range d {
		samples = append(samples, x.Seconds())
	}
	slices.Sort(d)
	med := d[len(d)/2]
	if len(d)%2 == 0 {
		med = (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	return stat{Median: med.Seconds(), Min: d[0].Seconds(), Max: d[len(d)-1].Seconds(), N: len(d), Samples: samples}
}

// ratio records num's median over den's, when both were measured.
func (b *benchResults) ratio(name, num, den string) {
	n, d := b.stats(num), b.stats(den)
	if n.N == 0 || d.N == 0 || d.Median == 0 {
		b.notes = append(b.notes, fmt.Sprintf("%s not computed: %s or %s was not measured", name, num, den))
		return
	}
	b.ratios[name] = n.Median / d.Median
}

func (b *benchResults) printTable(t *testing.T) {
	t.Logf("bench: %-50s %9s %9s %9s %3s", "scenario", "median", "min", "max", "n")
	for _, k := range b.order {
		st := b.stats(k)
		t.Logf("bench: %-50s %8.3fs %8.3fs %8.3fs %3d", b.labels[k], st.Median, st.Min, st.Max, st.N)
	}
	for _, k := range sortedKeys(b.ratios) {
		t.Logf("bench: %-50s %9.3f", k, b.ratios[k])
	}
	for _, k := range sortedKeys(b.memory) {
		m := b.memory[k]
		t.Logf("bench: sandbox_memory_overhead_%-24s %7.1f MiB (RSS beyond guest RAM; PSS-based %.1f; of it TCG buffer %.1f, binary and libraries %.1f, private %.1f)",
			k, m.OverheadMiB, m.OverheadPSSMiB, m.TCGBufferMiB, m.FileMiB, m.PrivateMiB)
		if m.TranslatedBlocks > 0 {
			t.Logf("bench: tcg_translated_blocks_%-28s %9d (%s; since flush %d of the buffer)", k, m.TranslatedBlocks, m.Measured, m.TranslationFlushes)
		}
	}
	for _, n := range b.notes {
		t.Logf("bench: note: %s", n)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
