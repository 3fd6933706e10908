package testcontainers

import (
	"context"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Environment the e2e suite sets: the daemon (DOCKER_HOST), the image, and
// TESTCONTAINERS_RYUK_DISABLED=true (Ryuk would be one more container
// watching a socket this suite does not need).
const (
	enableEnv = "HUSK_TC"
	imageEnv  = "HUSK_TC_IMAGE"
)

// TestGenericContainer: a container with an exposed port, waited for by
// its log and its listening port, then exec and copy to and from it.
func TestGenericContainer(t *testing.T) {
	if os.Getenv(enableEnv) != "1" {
		t.Skipf("run through the e2e suite (e2e.TestTestcontainers), which sets %s=1", enableEnv)
	}
	image := os.Getenv(imageEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        image,
			ExposedPorts: []string{"8080/tcp"},
			Cmd: []string{"sh", "-c",
				"mkdir -p /www && echo index > /www/index.html && echo server-ready && exec httpd -f -p 8080 -h /www"},
			WaitingFor: wait.ForAll(
				wait.ForLog("server-ready"),
				wait.ForListeningPort("8080/tcp"),
			).WithDeadline(3 * time.Minute),
		},
		Started: true,
	})
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start the container: %v", err)
	}

	endpoint, err := c.PortEndpoint(ctx, "8080/tcp", "http")
	if err != nil {
		t.Fatal(err)
	}
	if body := get(t, endpoint+"/index.html"); body != "index\n" {
		t.Errorf("GET /index.html through the mapped port: %q", body)
	}

	code, out, err := c.Exec(ctx, []string{"sh", "-c", "echo exec-ok; id -u"}, tcexec.Multiplexed())
	if err != nil || code != 0 {
		t.Fatalf("exec: code %d, %v", code, err)
	}
	b, _ := io.ReadAll(out)
	if !strings.Contains(string(b), "exec-ok\n0\n") {
		t.Errorf("exec output %q", b)
	}

	if err := c.CopyToContainer(ctx, []byte("copied in\n"), "/www/copied.txt", 0o644); err != nil {
		t.Fatalf("copy to the container: %v", err)
	}
	if body := get(t, endpoint+"/copied.txt"); body != "copied in\n" {
		t.Errorf("the copied file served back: %q", body)
	}
	rc, err := c.CopyFileFromContainer(ctx, "/www/index.html")
	if err != nil {
		t.Fatalf("copy from the container: %v", err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); string(b) != "index\n" {
		t.Errorf("copied from the container: %q", b)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return string(b)
}
