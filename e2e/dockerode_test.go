package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// nodeDir holds the dockerode script, its package.json and lock file;
// `make deps-test` runs `npm ci` there.
const nodeDir = "testdata/node"

// TestDockerode drives the daemon with dockerode from npm, unmodified:
// create/start/wait, a failing container's exit code, exec, logs,
// putArchive/getArchive, 404s and list filters.
func TestDockerode(t *testing.T) {
	requireSuite(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("needs Node.js (apt-get install nodejs npm, or make deps-test): %v", err)
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "dockerode", "package.json")); err != nil {
		t.Skipf("needs dockerode installed in e2e/%s (cd e2e/%s && npm ci --ignore-scripts, or make deps-test): %v", nodeDir, nodeDir, err)
	}
	img := pulled(t, testimages.Busybox)
	prefix := namePrefix(t)
	for _, suffix := range []string{"-run", "-fail", "-main", "-exited"} {
		containerName(t, suffix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "dockerode.js")
	cmd.Dir = nodeDir
	cmd.Env = append(dockerEnv(), "IMG="+img, "PREFIX="+prefix)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("dockerode:\n%s", out.String())
	if err != nil || !strings.HasSuffix(out.String(), "done\n") {
		t.Errorf("dockerode script failed: %v", err)
	}
}
