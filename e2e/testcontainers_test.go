package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// TestTestcontainers runs the testcontainers-go test (a module of its own,
// ./testcontainers) against the daemon under test, from inside the suite's
// network namespace where the mapped ports are.
func TestTestcontainers(t *testing.T) {
	requireBridge(t)
	// testcontainers-go waits for a listening port by exec'ing a probe in
	// the container, and copies with the archive endpoints: without those
	// routes the test cannot pass, whatever else works.
	for _, probe := range []struct{ method, path string }{
		{http.MethodPost, "/containers/e2e-no-such-container/exec"},
		{http.MethodGet, "/containers/e2e-no-such-container/archive?path=/"},
	} {
		if !routeExists(t, probe.method, probe.path) {
			t.Skipf("waits for %s %s (issue 6: exec and docker cp): the daemon has no such route", probe.method, probe.path)
		}
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("needs go to build the testcontainers-go test: %v", err)
	}
	img := pulled(t, testimages.Busybox)
	ctx, cancel := context.WithTimeout(context.Background(), 2*commandTimeout)
	defer cancel()
	// Built outside the namespace: a fresh machine has yet to download
	// testcontainers-go, and the namespace reaches no module proxy.
	bin := filepath.Join(t.TempDir(), "testcontainers.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, ".")
	build.Dir = "testcontainers"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the testcontainers-go test: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/var/run/netns/"+suite.Netns, bin, "-test.count=1", "-test.v")
	cmd.Dir = "testcontainers"
	cmd.Env = append(dockerEnv(), "HUSK_TC=1", "HUSK_TC_IMAGE="+img, "TESTCONTAINERS_RYUK_DISABLED=true",
		"TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1")
	out, err := cmd.CombinedOutput()
	t.Logf("testcontainers-go test:\n%s", out)
	if err != nil {
		t.Errorf("testcontainers-go test failed: %v", err)
	}
}

// routeExists tells a missing container (the route exists) from a missing
// route: dockerd answers the latter "page not found".
func routeExists(t *testing.T, method, path string) bool {
	t.Helper()
	_, body := apiCall(t, method, path)
	return !strings.Contains(body, "page not found")
}

// apiCall sends a bodiless request to the daemon's API.
func apiCall(t *testing.T, method, path string) (int, string) {
	t.Helper()
	sock := strings.TrimPrefix(suite.DockerHost, "unix://")
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://docker"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
