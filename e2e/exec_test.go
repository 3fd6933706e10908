package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

func TestExec(t *testing.T) {
	s := requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", name, img, "sleep", "1000"))

	tests := []struct {
		name string
		args []string
		in   string
		want result
	}{
		{"exit code", []string{name, "sh", "-c", "exit 3"}, "", result{Code: 3}},
		{"streams", []string{name, "sh", "-c", "echo out; echo err >&2"}, "", result{Stdout: "out\n", Stderr: "err\n"}},
		// User, working directory and environment; the main process is PID
		// 1 of the exec's PID namespace; the hostname is the container's.
		{"options", []string{"-u", "1234:5", "-w", "/tmp", "-e", "A=b", name, "sh", "-c",
			`id -u; id -g; pwd; echo $A; echo $HOSTNAME; tr '\0' ' ' </proc/1/cmdline; echo`}, "",
			result{Stdout: "1234\n5\n/tmp\nb\n" + id[:12] + "\nsleep 1000 \n"}},
		{"stdin", []string{"-i", name, "cat"}, "hello\n", result{Stdout: "hello\n"}},
		{"tty without a terminal", []string{"-t", name, "tty"}, "", result{Stdout: "/dev/pts/0\r\n"}},
		// Start failures come inside the stream, then exit 126 from the
		// exec's inspect.
		{"missing command", []string{name, "nosuch"}, "", result{Code: 126,
			Stdout: "OCI runtime exec failed: exec failed: unable to start container process: exec: \"nosuch\": executable file not found in $PATH: unknown\r\n"}},
		{"missing user", []string{"-u", "nobodyx", name, "true"}, "", result{Code: 126,
			Stdout: "unable to find user nobodyx: no matching entries in passwd file\r\n"}},
		{"missing working directory", []string{"-w", "/nonexist", name, "pwd"}, "", result{Code: 126,
			Stdout: "OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd (\"/nonexist\") set in config.json failed: no such file or directory: unknown\r\n"}},
		{"missing container", []string{"nope", "true"}, "", result{Code: 1, Stderr: "Error response from daemon: No such container: nope\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r result
			if tt.in != "" {
				r = dockerStdin(t, strings.NewReader(tt.in), append([]string{"exec"}, tt.args...)...)
			} else {
				r = docker(t, append([]string{"exec"}, tt.args...)...)
			}
			if r != tt.want {
				t.Errorf("got %+v, want %+v", r, tt.want)
			}
		})
	}

	// --privileged is accepted; inside a VM the process has every
	// capability anyway. (dockerd in this nested sandbox cannot apply the
	// capabilities, so only husk is held to it.)
	if s.Kind == "huskd" {
		if r := docker(t, "exec", "--privileged", name, "true"); r != (result{}) {
			t.Errorf("exec --privileged = %+v", r)
		}
	}

	// -d returns at once; the process runs on.
	if r := docker(t, "exec", "-d", name, "sh", "-c", "echo detached > /tmp/d"); r != (result{}) {
		t.Errorf("exec -d = %+v", r)
	}
	eventually(t, "the detached exec wrote its file", func() string {
		if r := docker(t, "exec", name, "cat", "/tmp/d"); r.Stdout != "detached\n" {
			return r.Stdout + r.Stderr
		}
		return ""
	})

	// An interactive shell on a terminal.
	p := startPTY(t, 24, 80, "exec", "-it", name, "sh")
	p.expect("# ")
	p.send("stty size; echo $TERM\r")
	p.expect("24 80\r\nxterm\r\n")
	p.send("exit 4\r")
	if code, _ := p.wait(); code != 4 {
		t.Errorf("exec -it sh; exit 4: exit code %d", code)
	}

	// The API: create, start detached, inspect.
	var created struct{ Id string }
	apiJSON(t, "POST", "/containers/"+name+"/exec", `{"Cmd":["sh","-c","exit 3"],"AttachStdout":true}`, http.StatusCreated, &created)
	var before execInspect
	apiJSON(t, "GET", "/exec/"+created.Id+"/json", "", http.StatusOK, &before)
	if before.Running || before.ExitCode != nil || before.ContainerID != id || before.ProcessConfig.Entrypoint != "sh" ||
		strings.Join(before.ProcessConfig.Arguments, " ") != "-c exit 3" || !before.OpenStdout || before.OpenStdin {
		t.Errorf("exec inspect before start = %+v", before)
	}
	if r := api(t, "POST", "/exec/"+created.Id+"/start", `{"Detach":true}`); r.Status != http.StatusOK || r.Body != "" {
		t.Errorf("detached start = %d %q, want 200 and no body", r.Status, r.Body)
	}
	eventually(t, "the exec's exit code is known", func() string {
		var after execInspect
		apiJSON(t, "GET", "/exec/"+created.Id+"/json", "", http.StatusOK, &after)
		if after.Running || after.ExitCode == nil || *after.ExitCode != 3 || after.Pid == 0 {
			return "not yet"
		}
		return ""
	})
	if r := api(t, "POST", "/exec/"+created.Id+"/start", `{"Detach":true}`); r.Status != http.StatusConflict ||
		r.Body != errorMessage("Error: Exec command "+created.Id+" has already run") {
		t.Errorf("second start = %d %q", r.Status, r.Body)
	}

	for _, tt := range []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"GET", "/exec/nope/json", "", http.StatusNotFound, "No such exec instance: nope"},
		{"POST", "/exec/nope/start", "{}", http.StatusNotFound, "No such exec instance: nope"},
		{"POST", "/exec/nope/resize?h=1&w=1", "", http.StatusNotFound, "No such exec instance: nope"},
		{"POST", "/containers/" + name + "/exec", "{}", http.StatusBadRequest, "No exec command specified"},
		{"POST", "/containers/nope/exec", `{"Cmd":["true"]}`, http.StatusNotFound, "No such container: nope"},
		// Not attach's wording, and not marked as the client's fault.
		{"POST", "/containers/" + name + "/exec", `{"Cmd":["true"],"DetachKeys":"bogus"}`, http.StatusInternalServerError, "Invalid escape keys (bogus) provided"},
	} {
		if r := api(t, tt.method, tt.path, tt.body); r.Status != tt.status || r.Body != errorMessage(tt.msg) {
			t.Errorf("%s %s = %d %q, want %d %q", tt.method, tt.path, r.Status, r.Body, tt.status, tt.msg)
		}
	}

	mustDocker(t, "rm", "-f", name)
	stopped := containerName(t, "-stopped")
	sid := strings.TrimSpace(mustDocker(t, "create", "--name", stopped, img, "true"))
	want := result{Code: 1, Stderr: "Error response from daemon: Container " + sid + " is not running\n"}
	if r := docker(t, "exec", stopped, "true"); r != want {
		t.Errorf("exec into a stopped container = %+v, want %+v", r, want)
	}
	mustDocker(t, "rm", stopped)
}

// execInspect is the part of GET /exec/{id}/json the tests check.
type execInspect struct {
	Running       bool
	ExitCode      *int
	Pid           int
	ContainerID   string
	OpenStdin     bool
	OpenStdout    bool
	ProcessConfig struct {
		Entrypoint string   `json:"entrypoint"`
		Arguments  []string `json:"arguments"`
	}
}
