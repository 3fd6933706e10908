package e2e

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// pythonDocker is Debian's python3 with python3-docker (make deps-test).
const pythonDocker = "/usr/bin/python3"

// TestDockerPy drives the daemon with docker-py, unmodified: run,
// ContainerError, exec_run, archives, logs, NotFound, filters and
// get_registry_data.
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

// TestDockerPyRemoteBuild builds from contexts the daemon fetches itself,
// as docker-py asks when build's path is a URL: a tarball, a git
// repository (served over git's "dumb" http protocol, ref and
// subdirectory in the fragment) and a bare Dockerfile; a missing one is
// docker-py's NotFound.
func TestDockerPyRemoteBuild(t *testing.T) {
	requireSuite(t)
	if err := exec.Command(pythonDocker, "-c", "import docker").Run(); err != nil {
		t.Skipf("needs Debian's python3-docker (apt-get install python3-docker, or make deps-test): %v", err)
	}
	img := pulled(t, testimages.Busybox)
	srvDir := t.TempDir()
	files := map[string]string{
		"Dockerfile":     "FROM " + img + "\nCOPY a /a\nCMD [\"cat\", \"/a\"]\n",
		"a":              "from the context\n",
		"sub/Dockerfile": "FROM " + img + "\nCOPY b /b\nCMD [\"cat\", \"/b\"]\n",
		"sub/b":          "from the git subdirectory\n",
	}
	work := writeContext(t, files)
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME=/dev/null",
			"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@localhost", "GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@localhost")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git(work, "init", "-q", "-b", "master")
	git(work, "add", ".")
	git(work, "commit", "-q", "-m", "context")
	git(srvDir, "clone", "-q", "--bare", work, "repo.git")
	git(filepath.Join(srvDir, "repo.git"), "update-server-info")
	if out, err := exec.Command("tar", "-C", work, "--exclude=.git", "-czf", filepath.Join(srvDir, "ctx.tar.gz"), ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(srvDir, "Dockerfile"), []byte("FROM "+img+"\nLABEL from=text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// In the suite's namespace, where the daemon is.
	var l net.Listener
	if err := suiteNetns().Do(func() (err error) { l, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(srvDir))}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + l.Addr().String()

	tag := namePrefix(t)
	removeImages(t, tag+":tar", tag+":git", tag+":text")
	script := `
import os, docker
c = docker.from_env(version="auto")
url, tag = os.environ["URL"], os.environ["TAG"]
for path, t in [(url + "/ctx.tar.gz", "tar"), (url + "/repo.git#master:sub", "git"), (url + "/Dockerfile", "text")]:
    c.images.build(path=path, tag=tag + ":" + t)
    print("built", t)
try:
    c.images.build(path=url + "/nope.tar")
    print("missing: no error")
except docker.errors.NotFound as e:
    print("missing:", e.explanation)
`
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonDocker, "-c", script)
	cmd.Env = append(dockerEnv(), "URL="+url, "TAG="+tag)
	out, err := cmd.CombinedOutput()
	want := "built tar\nbuilt git\nbuilt text\nmissing: error downloading remote context " + url + "/nope.tar: failed to GET " + url + "/nope.tar with status 404 Not Found: 404 page not found\n"
	if err != nil || string(out) != want {
		t.Fatalf("docker-py builds: %v\n%s\nwant:\n%s", err, out, want)
	}
	if got := mustDocker(t, "run", "--rm", tag+":tar"); got != "from the context\n" {
		t.Errorf("image built from the tarball prints %q", got)
	}
	if got := mustDocker(t, "run", "--rm", tag+":git"); got != "from the git subdirectory\n" {
		t.Errorf("image built from the git subdirectory prints %q", got)
	}
	if got := mustDocker(t, "inspect", "-f", "{{.Config.Labels.from}}", tag+":text"); got != "text\n" {
		t.Errorf("image built from the bare Dockerfile has label from=%q", got)
	}
}
