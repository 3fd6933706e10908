package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// pythonDocker is Debian's python3 with python3-docker (make deps-test).
const pythonDocker = "/usr/bin/python3"

// TestDockerPy drives the daemon with docker-py, unmodified: run,
// ContainerError, exec_run, archives, logs, NotFound and filters.
func TestDockerPy(t *testing.T) {
	requireSuite(t)
	if err := exec.Command(pythonDocker, "-c", "import docker").Run(); err != nil {
		t.Skipf("needs Debian's python3-docker (apt-get install python3-docker, or make deps-test): %v", err)
	}
	img := pulled(t, testimages.Busybox)
	prefix := namePrefix(t)
	for _, suffix := range []string{"-fail", "-main", "-logs"} {
		containerName(t, suffix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonDocker, "testdata/dockerpy.py")
	cmd.Env = append(dockerEnv(), "IMG="+img, "PREFIX="+prefix)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("docker-py:\n%s", out.String())
	if err != nil || !strings.HasSuffix(out.String(), "done\n") {
		t.Errorf("docker-py script failed: %v", err)
	}
}
