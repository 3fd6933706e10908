package e2e

import (
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

func TestRunEcho(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	r := docker(t, "run", "--rm", img, "echo", "hi")
	if r != (result{Stdout: "hi\n"}) {
		t.Errorf("run --rm echo hi = %+v, want stdout \"hi\\n\", no stderr, exit 0", r)
	}
}

func TestImageConfig(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Configured)
	tests := []struct {
		name string
		args []string
		want string
	}{{
		// Entrypoint sh -c runs the image's Cmd as user app — by name, so
		// with the supplementary groups /etc/group lists for it — in /work,
		// with the image's Env and HOME from app's passwd entry.
		name: "defaults",
		want: "cmd=default uid=1000 gid=1000 groups=1000 50 pwd=/work foo=bar home=/home/app\n",
	}, {
		name: "overrides",
		args: []string{"--entrypoint", "/bin/sh", "-w", "/tmp", "-u", "root", "-e", "X=1", img,
			"-c", `echo "uid=$(id -u) pwd=$(pwd) x=$X foo=$FOO home=$HOME"`},
		want: "uid=0 pwd=/tmp x=1 foo=bar home=/root\n",
	}, {
		// Arguments replace Cmd and keep Entrypoint; the group given with
		// the user replaces the primary group (runc adds supplementary
		// groups only when no group is given).
		name: "numeric user, args and env override",
		args: []string{"-u", "1000:50", "-e", "FOO=override", img,
			`echo "uid=$(id -u) gid=$(id -g) groups=$(id -G) foo=$FOO"`},
		want: "uid=1000 gid=50 groups=50 foo=override\n",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if args == nil {
				args = []string{img}
			}
			r := docker(t, append([]string{"run", "--rm"}, args...)...)
			if r != (result{Stdout: tt.want}) {
				t.Errorf("got %+v, want stdout %q, no stderr, exit 0", r, tt.want)
			}
		})
	}
}

func TestLayersWhiteoutsAndLinks(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Layered)
	script := `ls -A /data; ls -A /opq; test -e /dirgone && echo dirgone-present || echo dirgone-absent; ` +
		`stat -c %h /links/a; cat /links/b; readlink /links/c`
	r := docker(t, "run", "--rm", img, "sh", "-c", script)
	want := "keep\nnew\ndirgone-absent\n2\nhardlinked\na\n"
	if r != (result{Stdout: want}) {
		t.Errorf("got %+v, want stdout %q, no stderr, exit 0", r, want)
	}
}

func TestExitCodeAndSeparateStreams(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	r := docker(t, "run", "--rm", img, "sh", "-c", "echo out; echo err >&2; exit 3")
	if want := (result{Stdout: "out\n", Stderr: "err\n", Code: 3}); r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}
}

func TestMissingCommand(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	r := docker(t, "run", "--rm", "--name", name, img, "no-such-command")
	// The middle of dockerd's message names runc; what the CLI keys exit
	// 127 on, and what users read, is the exec error.
	if r.Code != 127 || r.Stdout != "" ||
		!strings.HasPrefix(r.Stderr, "docker: Error response from daemon: ") ||
		!strings.Contains(r.Stderr, `exec: "no-such-command": executable file not found in $PATH`) ||
		!strings.HasSuffix(r.Stderr, "\n\nRun 'docker run --help' for more information\n") {
		t.Errorf("got %+v, want exit 127 and dockerd's \"executable file not found\" error", r)
	}
	if got := mustDocker(t, "ps", "-a", "--filter", "name=^"+name+"$", "--format", "{{.Status}}"); got != "" {
		t.Errorf("ps -a after the failed run --rm = %q", got)
	}
}

func TestStdin(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	r := dockerStdin(t, strings.NewReader("hello\n"), "run", "-i", "--rm", img, "cat")
	if r != (result{Stdout: "hello\n"}) {
		t.Errorf("echo hello | docker run -i --rm cat = %+v, want stdout \"hello\\n\"", r)
	}
}
