package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
)

// Environment variables that select and configure the suite.
const (
	enableEnv = "HUSK_E2E"        // "1" runs the suite; anything else skips it
	daemonEnv = "HUSK_E2E_DAEMON" // "huskd" (default) or "dockerd"
	binDirEnv = "HUSK_BIN_DIR"    // prebuilt huskd + husk-agent; built from source if empty
	keepEnv   = "HUSK_E2E_KEEP"   // "1" keeps the temp dir (logs, state) for inspection
	chEnv     = "HUSK_CH_BINARY"  // a cloud-hypervisor binary: huskd runs its VMs under it, not QEMU
	kernelEnv = "HUSK_E2E_KERNEL" // a guest kernel for huskd (--kernel), e.g. make kernel's; empty: huskd's default
	// "off": no reference dockerd in this run, and a test that asks for
	// one fails. make e2e runs the tests that use it (E2E_REFERENCE_TESTS)
	// beside the others, in a suite of their own that holds the
	// machine-wide dockerd lock.
	referenceEnv = "HUSK_E2E_REFERENCE"

	// Internal: how the supervising process talks to the test process.
	roleEnv  = "HUSK_E2E_ROLE"
	stateEnv = "HUSK_E2E_STATE"
)

// The control channel between the test process and its supervisor: file
// descriptors 3 (requests from the tests) and 4 (answers).
const (
	controlRequestFD = 3
	controlAnswerFD  = 4
)

// Generous bounds that only keep a broken daemon from hanging the run;
// nothing asserts on how long anything takes.
const (
	setUpTimeout    = 10 * time.Minute
	daemonTimeout   = 2 * time.Minute
	teardownTimeout = 2 * time.Minute
)

// suiteState is what the supervisor hands to the test process.
type suiteState struct {
	Kind         harness.Kind
	DockerCLI    string
	DockerHost   string
	DockerConfig string
	Registry     string
	DaemonLog    string
	// DaemonRoot is huskd's --root; it means nothing for dockerd.
	DaemonRoot string
	// Netns is the network namespace the daemon and registry run in.
	Netns string
	// VMM is the VMM huskd was started with ("qemu", "cloud-hypervisor").
	VMM string
	// Digests maps each test image's repository to the digest pushed.
	Digests map[string]string
}

// suite and control are set once by TestMain in the test process, before
// any test runs, and only read afterwards; a TestMain has no other way to
// hand state to tests. suite is nil when the suite is disabled.
var (
	suite   *suiteState
	control *controlClient
)

// TestMain splits the run in two processes so that a panicking or
// timed-out test cannot leak the namespace, registry or daemon: the
// supervisor (this process) sets everything up, runs the tests in a child
// copy of this binary, and tears down whatever happened to the child.
func TestMain(m *testing.M) {
	switch {
	case os.Getenv(enableEnv) != "1":
		fmt.Fprintf(os.Stderr, "e2e: skipping the end-to-end suite; set %s=1 to run it (needs root; see e2e/README.md)\n", enableEnv)
		os.Exit(m.Run())
	case os.Getenv(roleEnv) == "tests":
		os.Exit(runTests(m))
	case slices.ContainsFunc(os.Args[1:], func(a string) bool { return strings.HasPrefix(a, "-test.list") }):
		os.Exit(m.Run())
	default:
		os.Exit(supervise())
	}
}

func runTests(m *testing.M) int {
	var st suiteState
	if err := json.Unmarshal([]byte(os.Getenv(stateEnv)), &st); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: bad %s from the supervisor: %v\n", stateEnv, err)
		return 1
	}
	suite = &st
	control = &controlClient{
		w: os.NewFile(controlRequestFD, "control-requests"),
		r: bufio.NewReader(os.NewFile(controlAnswerFD, "control-answers")),
	}
	return m.Run()
}

// supervise sets up the world, runs the tests in a child process and tears
// the world down again; it returns the process exit code.
func supervise() int {
	// Ctrl-C reaches the child too (same process group); the supervisor
	// stays alive to clean up.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	kind := harness.Kind(os.Getenv(daemonEnv))
	if kind == "" {
		kind = harness.Huskd
	}
	if missing := missingPrerequisites(kind); len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: %s=1 but prerequisites are missing:\n  - %s\n", enableEnv, strings.Join(missing, "\n  - "))
		return 1
	}

	w := &world{kind: kind}
	setUpCtx, cancel := context.WithTimeout(ctx, setUpTimeout)
	err := w.setUp(setUpCtx)
	cancel()
	code := 1
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: set-up failed: %v\n", err)
		w.printDaemonLogTail()
	} else {
		code = w.runTests(ctx)
	}
	if err := w.tearDown(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: teardown: %v\n", err)
		code = 1
	}
	return code
}

func missingPrerequisites(kind harness.Kind) []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (network namespaces and the daemon need it)")
	}
	need := []string{"ip", "nsenter", "docker", harness.RegistryBinary, testimages.DefaultBusybox}
	switch kind {
	case harness.Huskd:
		if ch := os.Getenv(chEnv); ch != "" {
			need = append(need, ch)
			if _, err := os.Stat("/dev/kvm"); err != nil {
				missing = append(missing, fmt.Sprintf("/dev/kvm, which cloud-hypervisor (%s=%s) needs (%v)", chEnv, ch, err))
			}
		}
		// QEMU is needed either way: --vmm auto calibrates with it.
		need = append(need, "qemu-system-x86_64")
		if os.Getenv(binDirEnv) == "" {
			need = append(need, "go")
		}
		if k := os.Getenv(kernelEnv); k != "" {
			if _, err := os.Stat(k); err != nil {
				missing = append(missing, fmt.Sprintf("the guest kernel %s=%s (%v)", kernelEnv, k, err))
			}
		} else if k, _ := filepath.Glob("/boot/vmlinuz-*"); len(k) == 0 {
			missing = append(missing, "a guest kernel /boot/vmlinuz-* (apt-get install linux-image-cloud-amd64)")
		}
	case harness.Dockerd:
		need = append(need, "dockerd", "containerd", "runc")
	default:
		missing = append(missing, fmt.Sprintf("%s=%q is neither %q nor %q", daemonEnv, kind, harness.Huskd, harness.Dockerd))
	}
	for _, n := range need {
		if _, err := exec.LookPath(n); err != nil {
			missing = append(missing, fmt.Sprintf("%s (%v)", n, err))
		}
	}
	return missing
}

// world is everything the supervisor sets up, torn down in reverse.
type world struct {
	kind     harness.Kind
	tmp      string
	ns       *harness.Netns
	registry *harness.Registry
	daemon   *harness.Daemon
	ref      *reference // started on request by TestDifferential
	state    suiteState
}

func (w *world) setUp(ctx context.Context) error {
	var err error
	// A short base keeps socket paths under the 108-byte limit.
	if w.tmp, err = os.MkdirTemp("/tmp", "husk-e2e-"); err != nil {
		return fmt.Errorf("create temp dir: %w", err)
	}
	if w.ns, err = harness.NewNetns(ctx, fmt.Sprintf("husk-e2e-%d", os.Getpid())); err != nil {
		return err
	}
	for _, d := range []string{"registry", "bin", "docker-config"} {
		if err := os.Mkdir(filepath.Join(w.tmp, d), 0o755); err != nil {
			return fmt.Errorf("create %s dir: %w", d, err)
		}
	}
	if w.registry, err = harness.StartRegistry(ctx, w.ns, filepath.Join(w.tmp, "registry")); err != nil {
		return err
	}
	set, err := testimages.Build(ctx, testimages.DefaultBusybox)
	if err != nil {
		return fmt.Errorf("build test images: %w", err)
	}
	digests, err := set.Push(ctx, w.registry.Host, remote.WithTransport(w.registry.Transport()))
	if err != nil {
		return fmt.Errorf("push test images: %w", err)
	}

	cli, err := exec.LookPath("docker")
	if err != nil {
		return err
	}
	cfg := harness.DaemonConfig{
		Kind:               w.kind,
		Dir:                filepath.Join(w.tmp, "daemon"),
		InsecureRegistries: []string{w.registry.Host},
		DockerCLI:          cli,
	}
	if w.kind == harness.Huskd {
		if cfg.BinDir = os.Getenv(binDirEnv); cfg.BinDir == "" {
			cfg.BinDir = filepath.Join(w.tmp, "bin")
			if err := harness.BuildHusk(ctx, "..", cfg.BinDir); err != nil {
				return err
			}
		}
		cfg.CHBinary = os.Getenv(chEnv)
		cfg.Kernel = os.Getenv(kernelEnv)
		cfg.Quiet = os.Getenv(benchEnv) == "1"
	}
	daemonCtx, cancel := context.WithTimeout(ctx, daemonTimeout)
	defer cancel()
	if w.daemon, err = harness.StartDaemon(daemonCtx, w.ns, cfg); err != nil {
		return err
	}

	w.state = suiteState{
		Kind:         w.kind,
		DockerCLI:    cli,
		DockerHost:   w.daemon.Host(),
		DockerConfig: filepath.Join(w.tmp, "docker-config"),
		Registry:     w.registry.Host,
		DaemonLog:    w.daemon.LogPath(),
		DaemonRoot:   filepath.Join(w.daemon.Dir(), "root"),
		Netns:        w.ns.Name,
		Digests:      map[string]string{},
	}
	if w.kind == harness.Huskd {
		w.state.VMM = "qemu"
		if cfg.CHBinary != "" {
			w.state.VMM = "cloud-hypervisor"
		}
	}
	for repo, d := range digests {
		w.state.Digests[repo] = d.String()
	}
	version, err := exec.CommandContext(ctx, cli, "--host", w.daemon.Host(), "version", "--format", "{{.Client.Version}}").Output()
	if err != nil {
		return fmt.Errorf("docker CLI version: %w", err)
	}
	fmt.Fprintf(os.Stderr, "e2e: docker CLI %s (%s), daemon %s (vmm %q) at %s, registry %s in netns %s, state in %s\n",
		strings.TrimSpace(string(version)), cli, w.kind, w.state.VMM, w.daemon.Host(), w.registry.Host, w.ns.Name, w.tmp)
	return nil
}

// runTests runs this binary again as the test process and serves its
// control requests until it exits; it returns the child's exit code.
func (w *world) runTests(ctx context.Context) int {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: control pipe: %v\n", err)
		return 1
	}
	ansR, ansW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		fmt.Fprintf(os.Stderr, "e2e: control pipe: %v\n", err)
		return 1
	}
	state, err := json.Marshal(w.state)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: encode state: %v\n", err)
		return 1
	}
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), roleEnv+"=tests", stateEnv+"="+string(state))
	failures := &harness.Failures{}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, io.MultiWriter(os.Stdout, failures), os.Stderr
	cmd.ExtraFiles = []*os.File{reqW, ansR} // become fds 3 and 4
	err = cmd.Start()
	reqW.Close()
	ansR.Close()
	if err != nil {
		reqR.Close()
		ansW.Close()
		fmt.Fprintf(os.Stderr, "e2e: start test process: %v\n", err)
		return 1
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		w.serveControl(ctx, reqR, ansW)
	}()
	err = cmd.Wait()
	// The child is gone, so its ends of the pipes are closed and
	// serveControl sees EOF.
	<-served
	fmt.Print(failures.Summary())
	reqR.Close()
	ansW.Close()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() > 0 {
			return exit.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "e2e: test process: %v\n", err)
		return 1
	}
	return 0
}

// serveControl answers the test process's requests, one line each.
func (w *world) serveControl(ctx context.Context, req *os.File, ans *os.File) {
	sc := bufio.NewScanner(req)
	for sc.Scan() {
		var err error
		answer := "ok"
		switch req := sc.Text(); {
		case strings.HasPrefix(req, "restart-with"):
			// "restart-with ARGS...": restart with these extra daemon
			// flags from now on (none: back to the default command line).
			w.daemon.SetExtraArgs(strings.Fields(strings.TrimPrefix(req, "restart-with")))
			rctx, cancel := context.WithTimeout(ctx, daemonTimeout)
			err = w.daemon.Restart(rctx)
			cancel()
		case req == "restart":
			rctx, cancel := context.WithTimeout(ctx, daemonTimeout)
			err = w.daemon.Restart(rctx)
			cancel()
		case req == "crash":
			rctx, cancel := context.WithTimeout(ctx, daemonTimeout)
			err = w.daemon.Crash(rctx)
			cancel()
		case req == "kill":
			err = w.daemon.Kill()
		case req == "start":
			rctx, cancel := context.WithTimeout(ctx, daemonTimeout)
			err = w.daemon.Start(rctx)
			cancel()
		case req == "reference":
			var host string
			host, err = w.startReference(ctx)
			answer = "ok " + host
		default:
			err = fmt.Errorf("unknown control request %q", req)
		}
		if err != nil {
			answer = "error " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		if _, werr := fmt.Fprintln(ans, answer); werr != nil {
			return
		}
	}
}

func (w *world) printDaemonLogTail() {
	if w.daemon != nil {
		fmt.Fprintf(os.Stderr, "e2e: last lines of %s:\n%s\n", w.daemon.LogPath(), tail(w.daemon.LogPath(), 60))
	}
}

// tearDown stops everything set up, checks that the daemon left no process
// behind, and removes the temp dir; it keeps going after errors.
func (w *world) tearDown() error {
	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	errs := w.ref.stop(ctx)
	if w.daemon != nil {
		if err := w.daemon.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop daemon: %w", err))
		}
		left, err := w.daemon.Leftovers()
		if err != nil {
			errs = append(errs, err)
		}
		for _, p := range left {
			errs = append(errs, fmt.Errorf("daemon left pid %d running: %s", p.PID, p.Cmdline))
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		if len(errs) > 0 {
			w.printDaemonLogTail()
		}
	}
	if w.registry != nil {
		if err := w.registry.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop registry: %w", err))
		}
	}
	if w.ns != nil {
		if err := w.ns.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if w.tmp != "" {
		if os.Getenv(keepEnv) == "1" {
			fmt.Fprintf(os.Stderr, "e2e: keeping %s (%s=1)\n", w.tmp, keepEnv)
		} else if err := removeAll(w.tmp); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeAll removes dir; dockerd may leave read-only or mounted-over
// subtrees, so a failure names the path rather than hiding it. What is
// still mounted under dir (dockerd's bind of its netns under its exec
// root, when it did not get to unmount it) is detached first, or the
// removal stops at it and the directory is left behind.
func removeAll(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// unmountUnder detaches the mounts below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	prefix := filepath.Clean(dir) + "/"
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// The fifth field is the mount point, with spaces and the like
		// octal-escaped; a temp dir's paths have none.
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], prefix) {
			points = append(points, fields[4])
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// controlClient sends requests to the supervisor.
type controlClient struct {
	mu sync.Mutex
	w  *os.File
	r  *bufio.Reader
}

func (c *controlClient) do(req string) error {
	_, err := c.query(req)
	return err
}

// query sends req and returns what follows "ok " in the answer.
func (c *controlClient) query(req string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := fmt.Fprintln(c.w, req); err != nil {
		return "", fmt.Errorf("send %q to the supervisor: %w", req, err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read the supervisor's answer to %q: %w", req, err)
	}
	line = strings.TrimSpace(line)
	if line != "ok" && !strings.HasPrefix(line, "ok ") {
		return "", errors.New(strings.TrimPrefix(line, "error "))
	}
	return strings.TrimPrefix(strings.TrimPrefix(line, "ok"), " "), nil
}
