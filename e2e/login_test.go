package e2e

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
)

// TestLogin logs in to a second registry, in the suite's namespace, that
// demands basic auth, then pushes and pulls a private repository with the
// stored credentials (sent as X-Registry-Auth) and without them.
func TestLogin(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	ns := &harness.Netns{Name: suite.Netns, Path: "/var/run/netns/" + suite.Netns}
	reg, err := harness.StartAuthRegistry(context.Background(), ns, filepath.Join(t.TempDir(), "registry"), []byte("e2e:"+string(hash)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reg.Close(context.Background()); err != nil {
			t.Errorf("stop the auth registry: %v", err)
		}
	})
	host := reg.Host
	private := host + "/private/busybox:latest"
	mustDocker(t, "tag", img, private)
	other := host + "/private/other:latest"
	mustDocker(t, "tag", img, other)
	t.Cleanup(func() { docker(t, "rmi", "-f", private, other); docker(t, "logout", host) })

	login := func(password string) result {
		return dockerStdin(t, strings.NewReader(password+"\n"), "login", "-u", "e2e", "--password-stdin", host)
	}
	pushing := func(repo string) string {
		return "The push refers to repository [" + host + "/private/" + repo + "]\nd3005cfd4385: Preparing\n"
	}
	// Expectations are dockerd 20.10's; digests differ between the
	// daemons (dockerd rewrites the manifest), so those are patterns.
	for _, step := range []struct {
		name string
		run  func() result
		want result
		// stdoutRE, when set, replaces want.Stdout; stderr is then not
		// checked either (the CLI's warnings name temp paths).
		stdoutRE string
	}{
		{name: "push without login", run: func() result { return docker(t, "push", private) },
			want: result{Code: 1, Stdout: pushing("busybox"), Stderr: "no basic auth credentials\n"}},
		{name: "login, bad password", run: func() result { return login("wrong") },
			want: result{Code: 1, Stderr: "Error response from daemon: login attempt to http://" + host + "/v2/ failed with status: 401 Unauthorized\n"}},
		{name: "login", run: func() result { return login("s3cret") }, stdoutRE: `^Login Succeeded\n$`},
		{name: "push", run: func() result { return docker(t, "push", private) },
			stdoutRE: "^" + regexp.QuoteMeta(pushing("busybox")+"d3005cfd4385: Pushed\nlatest: digest: sha256:") + `[0-9a-f]{64} size: \d+\n$`},
		{name: "untag", run: func() result { return docker(t, "rmi", private) }, stdoutRE: "^Untagged: " + regexp.QuoteMeta(private) + "\n"},
		{name: "pull with the stored login", run: func() result { return docker(t, "pull", private) },
			stdoutRE: "^latest: Pulling from private/busybox\n(.*\n)*Digest: sha256:[0-9a-f]{64}\nStatus: Downloaded newer image for " + regexp.QuoteMeta(private+"\n"+private+"\n") + "$"},
		{name: "logout", run: func() result { return docker(t, "logout", host) },
			want: result{Stdout: "Removing login credentials for " + host + "\n"}},
		{name: "untag again", run: func() result { return docker(t, "rmi", private) }, stdoutRE: "^Untagged: "},
		{name: "pull without login", run: func() result { return docker(t, "pull", private) },
			want: result{Code: 1, Stderr: `Error response from daemon: Head "http://` + host + `/v2/private/busybox/manifests/latest": no basic auth credentials` + "\n"}},
		{name: "pull, wrong credentials", run: func() result { return wrongCreds(t, host, "pull", private) },
			want: result{Code: 1, Stderr: "Error response from daemon: unauthorized: authentication required\n"}},
		{name: "push, wrong credentials", run: func() result { return wrongCreds(t, host, "push", other) },
			want: result{Code: 1, Stdout: pushing("other"), Stderr: "unauthorized: authentication required\n"}},
	} {
		r := step.run()
		if step.stdoutRE != "" {
			if r.Code != 0 || !regexp.MustCompile(step.stdoutRE).MatchString(r.Stdout) {
				t.Errorf("%s = %+v, want exit 0 and stdout matching %s", step.name, r, step.stdoutRE)
			}
		} else if r != step.want {
			t.Errorf("%s = %+v, want %+v", step.name, r, step.want)
		}
	}

	// The raw answers: dockerd 20.10 adds an empty IdentityToken, which
	// moby v28 leaves out.
	var ok struct{ Status string }
	apiJSON(t, "POST", "/auth", `{"username":"e2e","password":"s3cret","serveraddress":"`+host+`"}`, 200, &ok)
	if ok.Status != "Login Succeeded" {
		t.Errorf("POST /auth status = %q", ok.Status)
	}
	if r := api(t, "POST", "/auth", `{"username":"e2e","password":"nope","serveraddress":"http://`+host+`"}`); r.Status != 500 ||
		r.Body != errorMessage("login attempt to http://"+host+"/v2/ failed with status: 401 Unauthorized") {
		t.Errorf("POST /auth with a bad password = %d %q", r.Status, r.Body)
	}
}

// wrongCreds runs the CLI with a client config holding a wrong password
// for host, as a stale login leaves it.
func wrongCreds(t *testing.T, host string, args ...string) result {
	t.Helper()
	dir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("e2e:wrong"))
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"auths":{"`+host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	res := runCLI(t, append(dockerEnv(), "DOCKER_CONFIG="+dir), nil, args...)
	t.Logf("$ docker %s (wrong credentials)\n  exit %d, stdout %q, stderr %q", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
	return res
}
