package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

// commandTimeout only keeps a hung daemon from stalling the whole run.
const commandTimeout = 3 * time.Minute

// requireSuite skips t unless the suite is enabled, and arranges for the
// daemon's log to be shown if t fails.
func requireSuite(t *testing.T) *suiteState {
	t.Helper()
	// Reading the variable here, inside the test, also makes `go test`
	// key its result cache on it, so a cached skip is not reused once the
	// suite is enabled.
	if os.Getenv(enableEnv) != "1" || suite == nil {
		t.Skipf("end-to-end suite disabled; set %s=1 (see e2e/README.md)", enableEnv)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the %s log (%s):\n%s", suite.Kind, suite.DaemonLog, tail(suite.DaemonLog, 40))
		}
	})
	return suite
}

// result is what one docker CLI invocation produced.
type result struct {
	Stdout, Stderr string
	Code           int
}

// docker runs the docker CLI against the daemon under test.
func docker(t *testing.T, args ...string) result {
	t.Helper()
	return dockerStdin(t, nil, args...)
}

// dockerStdin runs the docker CLI with stdin connected to in.
func dockerStdin(t *testing.T, in io.Reader, args ...string) result {
	t.Helper()
	res := runCLI(t, dockerEnv(), in, args...)
	t.Logf("$ docker %s\n  exit %d, stdout %q, stderr %q%s", strings.Join(args, " "), res.Code, clip(res.Stdout), clip(res.Stderr), guestConsoles(res.Stderr))
	return res
}

// consoleLogRe finds the guest console logs that huskd's errors name.
var consoleLogRe = regexp.MustCompile(`\(console log: ([^\s)]+)\)`)

// guestConsoles returns the last lines of each guest console log that
// text names, read now: the container that owns the log is usually
// removed, and the log with it, before anyone can look at a failure.
func guestConsoles(text string) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, m := range consoleLogRe.FindAllStringSubmatch(text, -1) {
		if p := m[1]; !seen[p] {
			seen[p] = true
			fmt.Fprintf(&b, "\n  last lines of guest console %s:\n%s", p, tail(p, 30))
		}
	}
	return b.String()
}

// runCLI runs the docker CLI with env and stdin in (nil: none) and
// returns what it printed and its exit code; it fails t if the CLI
// cannot be run or does not finish within commandTimeout.
func runCLI(t *testing.T, env []string, in io.Reader, args ...string) result {
	t.Helper()
	res, err := tryCLI(env, in, args...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// tryCLI is runCLI for goroutines other than the test's, which must not
// fail it: the CLI not running or not finishing is its error.
func tryCLI(env []string, in io.Reader, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.DockerCLI, args...)
	cmd.Env = env
	if in != nil {
		cmd.Stdin = in
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("docker %s (%s) did not finish within %v; stdout %q, stderr %q",
			strings.Join(args, " "), envValue(env, "DOCKER_HOST"), commandTimeout, res.Stdout, res.Stderr)
	case errors.As(err, &exit):
		res.Code = exit.ExitCode()
	case err != nil:
		return res, fmt.Errorf("docker %s: %w", strings.Join(args, " "), err)
	}
	return res, nil
}

// envValue is the last value env gives key, as exec uses it.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// dockerEnv is the CLI's environment: the daemon under test, a private
// client config, and nothing inherited that could redirect it.
func dockerEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKER_") {
			env = append(env, kv)
		}
	}
	return append(env, "DOCKER_HOST="+suite.DockerHost, "DOCKER_CONFIG="+suite.DockerConfig, "DOCKER_CLI_HINTS=false")
}

// mustDocker runs the CLI and fails t unless it exits 0; it returns stdout.
func mustDocker(t *testing.T, args ...string) string {
	t.Helper()
	r := docker(t, args...)
	if r.Code != 0 {
		t.Fatalf("docker %s: exit %d, stderr %q", strings.Join(args, " "), r.Code, r.Stderr)
	}
	return r.Stdout
}

// ref is the registry reference of a test image.
func ref(repo string) string { return testimages.Ref(suite.Registry, repo) }

// pulled returns the reference of a test image after making sure the
// daemon has it, so that `docker run` prints nothing about pulling.
func pulled(t *testing.T, repo string) string {
	t.Helper()
	r := ref(repo)
	if docker(t, "image", "inspect", "--format", "{{.Id}}", r).Code != 0 {
		mustDocker(t, "pull", r)
	}
	return r
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// namePrefix is the prefix of every container name t uses.
func namePrefix(t *testing.T) string {
	return "e2e-" + strings.ToLower(unsafeName.ReplaceAllString(t.Name(), "-"))
}

// containerName returns a container name unique to t (plus suffix) and
// removes any container of that name when t ends.
func containerName(t *testing.T, suffix string) string {
	t.Helper()
	name := namePrefix(t) + suffix
	t.Cleanup(func() {
		// Best effort: the test normally removed it already.
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, suite.DockerCLI, "rm", "-f", name)
		cmd.Env = dockerEnv()
		_ = cmd.Run()
	})
	return name
}

// restartDaemon restarts the daemon under test on the same state.
func restartDaemon(t *testing.T) {
	t.Helper()
	if err := control.do("restart"); err != nil {
		t.Fatalf("restart %s: %v", suite.Kind, err)
	}
}

// killDaemon kills the daemon under test with SIGKILL and leaves it down.
// The returned func starts it again on the same state; the test's cleanup
// does if the test did not, before the cleanups registered earlier.
func killDaemon(t *testing.T) (start func()) {
	t.Helper()
	if err := control.do("kill"); err != nil {
		t.Fatalf("kill %s: %v", suite.Kind, err)
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { _ = control.do("start") }) })
	return func() {
		t.Helper()
		var err error
		once.Do(func() { err = control.do("start") })
		if err != nil {
			t.Fatalf("start %s: %v", suite.Kind, err)
		}
	}
}

// crashDaemon kills the daemon under test with SIGKILL and starts it again.
func crashDaemon(t *testing.T) {
	t.Helper()
	if err := control.do("crash"); err != nil {
		t.Fatalf("crash %s: %v", suite.Kind, err)
	}
}

// eventually polls check until it returns "" or commandTimeout passes; it
// is for states a daemon reaches asynchronously (a detached container's
// first output), and never measures how long that took.
func eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(commandTimeout)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %v: %s", what, commandTimeout, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clip shortens long command output (inspect JSON, save archives) for the
// test log.
func clip(s string) string {
	const max = 600
	if len(s) <= max {
		return s
	}
	return s[:max] + fmt.Sprintf("... (%d bytes)", len(s))
}
