package apicompat

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestDockerCLI runs the stock docker CLI against the server (with fake
// backends), when a docker binary is installed.
func TestDockerCLI(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker CLI in PATH")
	}
	sock, _, _ := unixServer(t)
	ctx := testContext(t)
	env := []string{"DOCKER_HOST=unix://" + sock, "DOCKER_CONFIG=" + t.TempDir(), "HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}

	tests := []struct {
		name       string
		args       []string
		stdin      string
		exitCode   int
		wantStdout string
		wantStderr string // substring
	}{
		{name: "version", args: []string{"version", "--format", "{{.Server.APIVersion}} {{.Server.Os}} {{.Server.Experimental}}"}, wantStdout: "1.50 linux true\n"},
		{name: "ps", args: []string{"ps", "-a", "--format", "{{.ID}} {{.Names}} {{.Image}}"}, wantStdout: "c1 one alpine\n"},
		{name: "run", args: []string{"run", "--rm", "-i", "--name", "r1", "alpine"}, stdin: "hi\n", exitCode: 3,
			wantStdout: "hello stdout\nstdin: hi\n", wantStderr: "hello stderr\n"},
		{name: "inspect missing", args: []string{"container", "inspect", "nope"}, exitCode: 1, wantStdout: "[]\n",
			wantStderr: "No such container: nope"},
		{name: "pull", args: []string{"pull", "-q", "localhost:5000/a/b:1"}, wantStdout: "localhost:5000/a/b:1\n"},
		{name: "pull denied", args: []string{"pull", "denied"}, exitCode: 1,
			wantStdout: "Using default tag: latest\n", wantStderr: "Error response from daemon: pull access denied for denied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(ctx, docker, tc.args...)
			cmd.Env = env
			cmd.Stdin = strings.NewReader(tc.stdin)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
				code = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.exitCode || stdout.String() != tc.wantStdout || !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("docker %s: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr containing %q",
					strings.Join(tc.args, " "), code, stdout.String(), stderr.String(), tc.exitCode, tc.wantStdout, tc.wantStderr)
			}
		})
	}
}
