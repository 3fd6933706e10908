package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// hundredLines prints 100 numbered lines of about a hundred bytes each as
// json-file stores them, so --log-opt max-size=1k rotates every ten.
const hundredLines = `for i in $(seq 1 100); do echo line-$i-abcdefghijklmnopqrstuvwxyz; done`

func numberedLines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line-%d-abcdefghijklmnopqrstuvwxyz\n", i)
	}
	return b.String()
}

// TestLogRotationAndDrivers covers --log-opt max-size/max-file/compress,
// the json-file, local and none drivers and the refusals; every
// expectation was checked against dockerd 20.10.
func TestLogRotationAndDrivers(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)

	// Rotation keeps max-file files of about max-size each; `docker logs`
	// reads them all, oldest first. Attached output is not affected.
	for _, tt := range []struct {
		suffix string
		opts   []string
		files  []string // beside LogPath
	}{
		{"-plain", []string{"--log-opt", "max-size=1k", "--log-opt", "max-file=3"}, []string{".1", ".2"}},
		{"-gzip", []string{"--log-opt", "max-size=1k", "--log-opt", "max-file=3", "--log-opt", "compress=true"}, []string{".1.gz", ".2.gz"}},
	} {
		name := containerName(t, tt.suffix)
		args := append(append([]string{"run", "--name", name}, tt.opts...), img, "sh", "-c", hundredLines)
		if r := docker(t, args...); r != (result{Stdout: numberedLines(1, 100)}) {
			t.Errorf("run %s: exit %d, %d bytes of stdout, stderr %q", name, r.Code, len(r.Stdout), r.Stderr)
		}
		if r := docker(t, "logs", name); r != (result{Stdout: numberedLines(71, 100)}) {
			t.Errorf("logs of %s = exit %d, stdout %q, stderr %q; want lines 71 to 100", name, r.Code, r.Stdout, r.Stderr)
		}
		if got := mustDocker(t, "logs", "--tail", "2", name); got != numberedLines(99, 100) {
			t.Errorf("logs --tail 2 of %s = %q", name, got)
		}
		path := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.LogPath}}", name))
		for _, suffix := range append([]string{""}, tt.files...) {
			if _, err := os.Stat(path + suffix); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		for _, extra := range []string{".3", ".3.gz"} {
			if _, err := os.Stat(path + extra); err == nil {
				t.Errorf("%s: %s kept beyond max-file", name, path+extra)
			}
		}
		mustDocker(t, "rm", name)
	}
	rot := containerName(t, "-inspect")
	mustDocker(t, "create", "--name", rot, "--log-opt", "max-size=1k", "--log-opt", "max-file=3", img, "true")
	if got := mustDocker(t, "inspect", "-f", "{{json .HostConfig.LogConfig}}", rot); got != `{"Type":"json-file","Config":{"max-file":"3","max-size":"1k"}}`+"\n" {
		t.Errorf("LogConfig = %s", got)
	}

	// none: attached output still flows, nothing can be read back.
	none := containerName(t, "-none")
	if r := docker(t, "run", "--name", none, "--log-driver", "none", img, "echo", "to-none"); r != (result{Stdout: "to-none\n"}) {
		t.Errorf("run --log-driver none = %+v", r)
	}
	if r := docker(t, "logs", none); r != (result{Code: 1, Stderr: "Error response from daemon: configured logging driver does not support reading\n"}) {
		t.Errorf("logs of a none container = %+v", r)
	}
	if got := mustDocker(t, "inspect", "-f", "{{json .HostConfig.LogConfig}} [{{.LogPath}}]", none); got != `{"Type":"none","Config":{}} []`+"\n" {
		t.Errorf("none's LogConfig = %s", got)
	}
	// local: read back like json-file, no LogPath.
	local := containerName(t, "-local")
	mustDocker(t, "run", "--name", local, "--log-driver", "local", img, "sh", "-c", "echo out; echo err >&2")
	if r := docker(t, "logs", local); r != (result{Stdout: "out\n", Stderr: "err\n"}) {
		t.Errorf("logs of a local container = %+v", r)
	}
	if got := mustDocker(t, "inspect", "-f", "{{json .HostConfig.LogConfig}} [{{.LogPath}}]", local); got != `{"Type":"local","Config":{}} []`+"\n" {
		t.Errorf("local's LogConfig = %s", got)
	}

	// Refusals: unknown drivers and options at create; bad values when
	// the container starts (the --rm container is gone either way).
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--log-driver", "bogus"}, `error looking up logging plugin bogus: plugin "bogus" not found`},
		{[]string{"--log-opt", "foo=bar"}, "unknown log opt 'foo' for json-file log driver"},
		{[]string{"--log-driver", "local", "--log-opt", "tag=x"}, "unknown log opt 'tag' for log driver local"},
		{[]string{"--log-opt", "max-size=bogus"}, "failed to initialize logging driver: invalid size: 'bogus'"},
		{[]string{"--log-opt", "max-size=0"}, "failed to initialize logging driver: max-size must be a positive number"},
		{[]string{"--log-opt", "max-size=1k", "--log-opt", "max-file=0"}, "failed to initialize logging driver: max-file cannot be less than 1"},
		{[]string{"--log-opt", "compress=true"}, "failed to initialize logging driver: compress cannot be true when max-file is less than 2 or max-size is not set"},
	} {
		args := append(append([]string{"run", "--rm"}, tt.args...), img, "true")
		want := result{Code: 125, Stderr: "docker: Error response from daemon: " + tt.msg + "\n\nRun 'docker run --help' for more information\n"}
		if r := docker(t, args...); r != want {
			t.Errorf("run %q = %+v, want %+v", tt.args, r, want)
		}
	}
}

// TestLogsTimeFilters checks logs -t, --since, --until and --tail against
// what dockerd 20.10 prints for the same container.
func TestLogsTimeFilters(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	// The pauses only keep the three lines' times apart.
	mustDocker(t, "run", "--name", name, img, "sh", "-c", "echo a; sleep 2; echo b; sleep 2; echo c")
	stamped := mustDocker(t, "logs", "-t", name)
	lines := strings.Split(strings.TrimSuffix(stamped, "\n"), "\n")
	stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z [abc]$`)
	if len(lines) != 3 {
		t.Fatalf("logs -t = %q", stamped)
	}
	for _, l := range lines {
		if !stamp.MatchString(l) {
			t.Errorf("logs -t line %q is not an RFC 3339 time with nanoseconds and the line", l)
		}
	}
	b, _, _ := strings.Cut(lines[1], " ")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--since", b}, "b\nc\n"},
		{[]string{"--until", b}, "a\nb\n"},
		{[]string{"--since", b, "--until", b}, "b\n"},
		{[]string{"--until", "0"}, "a\nb\nc\n"},
		{[]string{"--since", "2000-01-01", "--until", "2000-01-02"}, ""},
		{[]string{"--tail", "0"}, ""},
		{[]string{"--tail", "1"}, "c\n"},
		{[]string{"--tail", "all"}, "a\nb\nc\n"},
		{[]string{"--tail", "-1"}, "a\nb\nc\n"},
		{[]string{"--tail", "bogus"}, "a\nb\nc\n"},
		{[]string{"-f", "--until", b}, "a\nb\n"},
	} {
		args := append(append([]string{"logs"}, tt.args...), name)
		if r := docker(t, args...); r != (result{Stdout: tt.want}) {
			t.Errorf("logs %q = %+v, want stdout %q", tt.args, r, tt.want)
		}
	}
	if got := mustDocker(t, "logs", "--tail", "1", "-t", name); got != lines[2]+"\n" {
		t.Errorf("logs --tail 1 -t = %q, want %q", got, lines[2]+"\n")
	}
	mustDocker(t, "rm", name)
}
