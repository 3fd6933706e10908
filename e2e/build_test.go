package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

// writeContext creates a build context directory from name → content.
func writeContext(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// dockerBuild runs `docker build` with the classic builder, which is all
// this CLI has (no buildx); DOCKER_BUILDKIT=0 only makes that explicit.
func dockerBuild(t *testing.T, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.DockerCLI, append([]string{"build"}, append(args, dir)...)...)
	cmd.Env = append(dockerEnv(), "DOCKER_BUILDKIT=0")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{Stdout: stdout.String(), Stderr: stderr.String()}
	if ctx.Err() != nil {
		t.Fatalf("docker build did not finish: stdout %q, stderr %q", res.Stdout, res.Stderr)
	}
	var exit *exec.ExitError
	switch {
	case errorsAs(err, &exit):
		res.Code = exit.ExitCode()
	case err != nil:
		t.Fatalf("docker build: %v", err)
	}
	t.Logf("$ docker build %s\n  exit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
	return res
}

func errorsAs(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}

// builtName is a repository name unique to the test.
func builtName(t *testing.T) string {
	return "husk-e2e/" + strings.ToLower(unsafeName.ReplaceAllString(t.Name(), "-"))
}

// removeImages removes refs when t ends, best effort.
func removeImages(t *testing.T, refs ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, suite.DockerCLI, append([]string{"rmi", "-f"}, refs...)...)
		cmd.Env = dockerEnv()
		_ = cmd.Run()
	})
}

var builtID = regexp.MustCompile(`(?m)^Successfully built ([0-9a-f]{12})$`)

const multiStageDockerfile = `ARG BASE
FROM $BASE AS build
ARG MSG=hello
WORKDIR /src
COPY a.txt ./
RUN echo "$MSG" > out.txt && cat a.txt
FROM $BASE
COPY --from=build /src/ /app/
COPY --chown=app:app sub/ /app/sub/
RUN rm /bin/vi && echo removed
USER app
EXPOSE 8080
LABEL org.husk.build=yes
CMD ["cat", "/app/out.txt"]
`

// TestBuildMultiStageRunPushPull builds a multi-stage Dockerfile (ARG
// before FROM, COPY --from, .dockerignore, --chown, USER, EXPOSE, LABEL,
// a RUN deleting a file of the base image), runs and inspects the result,
// rebuilds it from the cache, pushes it to the registry and pulls it back
// after removing it.
func TestBuildMultiStageRunPushPull(t *testing.T) {
	requireSuite(t)
	base := pulled(t, testimages.Busybox)
	repo := builtName(t)
	tag := repo + ":1"
	pushRef := suite.Registry + "/" + repo + ":v1"
	removeImages(t, tag, pushRef)
	dir := writeContext(t, map[string]string{
		"Dockerfile":      multiStageDockerfile,
		"a.txt":           "from a.txt\n",
		"sub/b.txt":       "b\n",
		"sub/ignored.txt": "must not be copied\n",
		".dockerignore":   "sub/ignored.txt\n",
	})

	r := dockerBuild(t, dir, "--build-arg", "BASE="+base, "--build-arg", "MSG=bye", "-t", tag)
	if r.Code != 0 {
		t.Fatalf("build failed: exit %d", r.Code)
	}
	for _, want := range []string{
		"Step 1/14 : ARG BASE\n",
		"Step 2/14 : FROM $BASE AS build\n",
		"Step 6/14 : RUN echo \"$MSG\" > out.txt && cat a.txt\n ---> Running in ",
		"from a.txt\nRemoving intermediate container ",
		"Step 10/14 : RUN rm /bin/vi && echo removed\n ---> Running in ",
		"Successfully tagged " + tag + "\n",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("build output lacks %q", want)
		}
	}
	m := builtID.FindStringSubmatch(r.Stdout)
	if m == nil {
		t.Fatalf("no \"Successfully built\" line")
	}
	id := m[1]

	if got := mustDocker(t, "run", "--rm", tag); got != "bye\n" {
		t.Errorf("run = %q, want the RUN's output file", got)
	}
	check := `test -e /bin/vi; echo vi=$?; ls /app /app/sub | tr '\n' ' '; echo; id -u; stat -c %U:%G /app/sub/b.txt; cat /app/a.txt`
	want := "vi=1\n/app: a.txt out.txt sub  /app/sub: b.txt \n1000\napp:app\nfrom a.txt\n"
	if got := mustDocker(t, "run", "--rm", tag, "sh", "-c", check); got != want {
		t.Errorf("image contents:\n%s\nwant:\n%s", got, want)
	}

	var inspect []struct {
		ID     string `json:"Id"`
		Config struct {
			User         string
			ExposedPorts map[string]struct{}
			Labels       map[string]string
			Cmd          []string
		}
		RootFS struct{ Layers []string }
	}
	if err := json.Unmarshal([]byte(mustDocker(t, "image", "inspect", tag)), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("inspect: %v", err)
	}
	got := inspect[0]
	if !strings.HasPrefix(got.ID, "sha256:"+id) || got.Config.User != "app" || got.Config.Labels["org.husk.build"] != "yes" ||
		strings.Join(got.Config.Cmd, " ") != "cat /app/out.txt" {
		t.Errorf("inspect = %+v", got)
	}
	if _, ok := got.Config.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("ExposedPorts = %v, want 8080/tcp", got.Config.ExposedPorts)
	}
	// The base's layer, COPY --from, COPY and the RUN's.
	if len(got.RootFS.Layers) != 4 {
		t.Errorf("%d layers, want 4: %v", len(got.RootFS.Layers), got.RootFS.Layers)
	}

	hist := mustDocker(t, "history", "--no-trunc", "--format", "{{.ID}}|{{.CreatedBy}}", tag)
	lines := strings.Split(strings.TrimSpace(hist), "\n")
	if len(lines) < 8 || !strings.HasPrefix(lines[0], "sha256:"+id) ||
		!strings.Contains(lines[0], "|/bin/sh -c #(nop)  CMD [") {
		t.Errorf("history starts %q", lines[0])
	}
	for _, want := range []string{"|/bin/sh -c #(nop)  USER app", "|/bin/sh -c rm /bin/vi && echo removed", "|/bin/sh -c #(nop)  EXPOSE 8080"} {
		if !strings.Contains(hist, want) {
			t.Errorf("history lacks %q:\n%s", want, hist)
		}
	}

	// The same build again is served from the cache, step by step.
	r = dockerBuild(t, dir, "--build-arg", "BASE="+base, "--build-arg", "MSG=bye", "-t", tag)
	if r.Code != 0 || strings.Contains(r.Stdout, "Running in") || !strings.Contains(r.Stdout, "Successfully built "+id+"\n") {
		t.Errorf("rebuild did not come from the cache")
	}
	if n := strings.Count(r.Stdout, " ---> Using cache\n"); n != 11 {
		t.Errorf("rebuild used the cache %d times, want 11", n)
	}

	// Push, forget, pull back.
	mustDocker(t, "tag", tag, pushRef)
	r = docker(t, "push", pushRef)
	if r.Code != 0 || !strings.Contains(r.Stdout, "The push refers to repository ["+suite.Registry+"/"+repo+"]\n") ||
		!regexp.MustCompile(`(?m)^v1: digest: sha256:[0-9a-f]{64} size: \d+$`).MatchString(r.Stdout) {
		t.Fatalf("push = %+v", r)
	}
	mustDocker(t, "rmi", tag, pushRef)
	if r := docker(t, "image", "inspect", pushRef); r.Code == 0 {
		t.Fatalf("image still present after rmi")
	}
	if r := docker(t, "pull", pushRef); r.Code != 0 || !strings.Contains(r.Stdout, "Status: Downloaded newer image for "+pushRef) {
		t.Fatalf("pull back = %+v", r)
	}
	if got := mustDocker(t, "run", "--rm", pushRef); got != "bye\n" {
		t.Errorf("run of the pulled image = %q", got)
	}
	if pulledID := strings.TrimSpace(mustDocker(t, "image", "inspect", "-f", "{{.Id}}", pushRef)); !strings.HasPrefix(pulledID, "sha256:"+id) {
		t.Errorf("pulled image %s, pushed %s", pulledID, id)
	}
}

// TestBuildFailingRun: a RUN that exits 7 fails the build with dockerd's
// message, and the CLI exits 7.
func TestBuildFailingRun(t *testing.T) {
	requireSuite(t)
	base := pulled(t, testimages.Busybox)
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM " + base + "\nRUN echo out; echo err >&2; exit 7\n"})
	r := dockerBuild(t, dir)
	if r.Code != 7 {
		t.Errorf("exit %d, want 7", r.Code)
	}
	if !strings.Contains(r.Stdout, "Step 2/2 : RUN echo out; echo err >&2; exit 7\n ---> Running in ") || !strings.Contains(r.Stdout, "out\n") {
		t.Errorf("stdout lacks the step and its output")
	}
	if !strings.HasSuffix(r.Stderr, "The command '/bin/sh -c echo out; echo err >&2; exit 7' returned a non-zero code: 7\n") {
		t.Errorf("stderr does not end with dockerd's message")
	}
}

// TestBuildErrorsAsDockerd: a missing COPY source and an unknown
// instruction are worded as dockerd words them.
func TestBuildErrorsAsDockerd(t *testing.T) {
	requireSuite(t)
	base := pulled(t, testimages.Busybox)
	r := dockerBuild(t, writeContext(t, map[string]string{"Dockerfile": "FROM " + base + "\nCOPY nope /x\n"}))
	if r.Code != 1 || !strings.HasSuffix(r.Stderr, "COPY failed: file not found in build context or excluded by .dockerignore: stat nope: file does not exist\n") {
		t.Errorf("missing source: exit %d", r.Code)
	}
	r = dockerBuild(t, writeContext(t, map[string]string{"Dockerfile": "FROM " + base + "\nFOO bar\n"}))
	if r.Code != 1 || !strings.HasSuffix(r.Stderr, "Error response from daemon: dockerfile parse error line 2: unknown instruction: FOO\n") {
		t.Errorf("unknown instruction: exit %d", r.Code)
	}
	// dockerd looks a RUN's user up itself and says only that.
	r = dockerBuild(t, writeContext(t, map[string]string{"Dockerfile": "FROM " + base + "\nUSER nosuch\nRUN id\n"}))
	if r.Code != 1 || !strings.HasSuffix(r.Stderr, "\nunable to find user nosuch: no matching entries in passwd file\n") {
		t.Errorf("a RUN as an unknown user: %+v", r)
	}
}

// TestBuildVolumes: with the classic builder, what a RUN step writes under
// a VOLUME declared before it is left out of the image, the next step sees
// the volume as it was, and a volume's missing mount point is made and
// kept, as dockerd's classic builder does with the volumes of each step's
// container.
func TestBuildVolumes(t *testing.T) {
	requireSuite(t)
	base := pulled(t, testimages.Busybox)
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM " + base + "\n" +
		"RUN mkdir /vol && echo before > /vol/f\n" +
		"VOLUME /vol /data/db\n" +
		"RUN echo after > /vol/f && echo new > /vol/g && echo x > /data/db/x && echo kept > /kept\n" +
		"RUN cat /vol/f > /seen; ls /data/db >> /seen\n"})
	tag := builtName(t)
	removeImages(t, tag)
	if r := dockerBuild(t, dir, "-t", tag); r.Code != 0 {
		t.Fatalf("build: exit %d", r.Code)
	}
	got := mustDocker(t, "run", "--rm", tag, "sh", "-c", "cat /vol/f /seen /kept; ls /vol; ls /data/db; test -d /data/db && echo made")
	if want := "before\nbefore\nkept\nf\nmade\n"; got != want {
		t.Errorf("the image holds %q, want %q", got, want)
	}
}

// TestBuildCacheIgnoresMtimes: rebuilding after the sources were touched
// (as a fresh checkout does) takes every step from the cache, as dockerd's
// classic builder does, the COPY and the RUN after it included.
func TestBuildCacheIgnoresMtimes(t *testing.T) {
	requireSuite(t)
	base := pulled(t, testimages.Busybox)
	dir := writeContext(t, map[string]string{
		"Dockerfile": "FROM " + base + "\nCOPY src /src\nRUN cp /src /built-" + namePrefix(t) + "\n",
		"src":        "source\n",
	})
	tag := namePrefix(t) + ":v1"
	t.Cleanup(func() { docker(t, "rmi", "-f", tag) })
	if r := dockerBuild(t, dir, "-t", tag); r.Code != 0 {
		t.Fatalf("build: %+v", r)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "src"), later, later); err != nil {
		t.Fatal(err)
	}
	r := dockerBuild(t, dir, "-t", tag)
	if r.Code != 0 || strings.Count(r.Stdout, " ---> Using cache\n") != 2 || strings.Contains(r.Stdout, "Running in") {
		t.Errorf("rebuild after a touch: %+v, want the COPY and the RUN from the cache", r)
	}
}

// TestBuildNetwork: RUN steps are connected as dockerd connects its build
// containers: to the network `--network` names, with `--add-host` names
// in /etc/hosts, and not at all with `--network none`; ADD fetches a URL
// from the daemon. The server is a container on a network of the test's
// own, reached by address (the reference dockerd runs without iptables,
// so without its embedded DNS). No TAP is left behind.
func TestBuildNetwork(t *testing.T) {
	s := requireSuite(t)
	img := pulled(t, testimages.Busybox)
	net := namePrefix(t) + "-net"
	t.Cleanup(func() {
		cmd := exec.Command(suite.DockerCLI, "network", "rm", net)
		cmd.Env = dockerEnv()
		_ = cmd.Run()
	})
	mustDocker(t, "network", "create", net)
	srv := containerName(t, "-srv")
	mustDocker(t, append([]string{"run", "-d", "--name", srv, "--network", net, img}, webServer("srv")...)...)
	srvIP := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{(index .NetworkSettings.Networks \""+net+"\").IPAddress}}", srv))
	url := "http://" + srvIP + ":8080/index.html"
	eventually(t, "the server answers", func() string {
		r := docker(t, "run", "--rm", "--network", net, img, "wget", "-q", "-O", "-", url)
		if r.Stdout != "hello from srv\n" {
			return fmt.Sprintf("%+v", r)
		}
		return ""
	})

	tag := namePrefix(t) + ":net"
	removeImages(t, tag)
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM " + img + "\n" +
		"RUN wget -q -O /by-name http://web:8080/index.html && grep -c web /etc/hosts > /hosts-lines\n" +
		"ADD " + url + " /added/\n"})
	if r := dockerBuild(t, dir, "--network", net, "--add-host", "web:"+srvIP, "-t", tag); r.Code != 0 {
		t.Fatalf("build on %s: %+v", net, r)
	}
	got := mustDocker(t, "run", "--rm", tag, "sh", "-c", "cat /by-name /hosts-lines /added/index.html; stat -c %a /added/index.html")
	if got != "hello from srv\n1\nhello from srv\n600\n" {
		t.Errorf("fetched in the build: %q, want the page by name, one hosts line, the page ADDed with mode 600", got)
	}

	none := writeContext(t, map[string]string{"Dockerfile": "FROM " + img + "\nRUN wget -q -T 5 -O - " + url + "\n"})
	if r := dockerBuild(t, none, "--no-cache", "--network", "none"); r.Code == 0 || !strings.Contains(r.Stderr, "returned a non-zero code") {
		t.Errorf("build with --network none reached the server: %+v", r)
	}
	if r := dockerBuild(t, none, "--no-cache", "--network", "nosuch-"+namePrefix(t)); r.Code != 1 || !strings.Contains(r.Stderr, "network nosuch-"+namePrefix(t)+" not found") {
		t.Errorf("build with an unknown network: %+v", r)
	}
	missing := writeContext(t, map[string]string{"Dockerfile": "FROM " + img + "\nADD http://" + srvIP + ":8080/nope /x\n"})
	if r := dockerBuild(t, missing); r.Code != 1 || !strings.Contains(r.Stderr, "ADD failed: failed to GET http://"+srvIP+":8080/nope with status 404 Not Found") {
		t.Errorf("ADD of a missing URL: %+v", r)
	}
	if s.Kind == "huskd" {
		mustDocker(t, "rm", "-f", srv)
		if taps := hostLinks(t, "hk"); len(taps) != 0 {
			t.Errorf("TAPs left after the builds: %v", taps)
		}
	}
}

// TestBuildEvents: docker events shows a build's steps as dockerd's
// intermediate containers: a RUN's create, attach, start, die and destroy
// (with a network connect and disconnect around its run), a metadata
// step's create and destroy, nothing for COPY; the container's attributes
// carry the step's labels.
func TestBuildEvents(t *testing.T) {
	s := requireSuite(t)
	img := pulled(t, testimages.Busybox)
	dir := writeContext(t, map[string]string{
		"Dockerfile": "FROM " + img + "\nRUN true\nLABEL e2e-step=label\nCOPY f /f\n",
		"f":          "x",
	})
	since := eventsNow()
	if r := dockerBuild(t, dir, "--no-cache", "-q"); r.Code != 0 {
		t.Fatalf("build: %+v", r)
	}
	until := fmt.Sprint(time.Now().Add(time.Second).Unix())
	events := func(typ string) string {
		return mustDocker(t, "events", "--since", since, "--until", until, "--filter", "type="+typ,
			"--format", `{{.Action}} {{index .Actor.Attributes "exitCode"}}{{index .Actor.Attributes "e2e-step"}}{{if eq .Type "network"}}{{.Actor.Attributes.name}}{{end}}`)
	}
	if got, want := events("container"), "create \nattach \nstart \ndie 0\ndestroy \ncreate label\ndestroy label\n"; got != want {
		t.Errorf("container events of the build:\n%s\nwant:\n%s", got, want)
	}
	// The suite's dockerd runs without a bridge; huskd has its default one.
	if s.Kind == "huskd" {
		if got, want := events("network"), "connect bridge\ndisconnect bridge\n"; got != want {
			t.Errorf("network events of the build:\n%s\nwant:\n%s", got, want)
		}
	}
}
