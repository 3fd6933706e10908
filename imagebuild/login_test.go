package imagebuild

import (
	"context"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	mobyregistry "github.com/moby/moby/api/types/registry"
)

func TestLogin(t *testing.T) {
	host := testRegistry(t, basicAuth("alice", "s3cret"))
	open := testRegistry(t, nil)
	s := newService(t, "", nil)
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		cfg     mobyregistry.AuthConfig
		wantErr string
	}{
		{"right password", mobyregistry.AuthConfig{Username: "alice", Password: "s3cret", ServerAddress: host}, ""},
		{"with a scheme and path", mobyregistry.AuthConfig{Username: "alice", Password: "s3cret", ServerAddress: "http://" + host + "/v2/"}, ""},
		{"wrong password", mobyregistry.AuthConfig{Username: "alice", Password: "nope", ServerAddress: host},
			"login attempt to http://" + host + "/v2/ failed with status: 401 Unauthorized"},
		{"no credentials", mobyregistry.AuthConfig{ServerAddress: host},
			"login attempt to http://" + host + "/v2/ failed with status: 401 Unauthorized"},
		// A registry without auth takes anyone, as dockerd finds.
		{"open registry", mobyregistry.AuthConfig{Username: "bob", Password: "x", ServerAddress: open}, ""},
	} {
		status, token, err := s.Login(ctx, tt.cfg)
		switch {
		case tt.wantErr == "" && (err != nil || status != "Login Succeeded" || token != ""):
			t.Errorf("%s: Login = %q, %q, %v; want success", tt.name, status, token, err)
		case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
			t.Errorf("%s: Login error = %v, want %q", tt.name, err, tt.wantErr)
		case tt.wantErr != "" && (errdefs.IsUnauthorized(err) || errdefs.IsInvalidArgument(err)):
			t.Errorf("%s: Login error class %T, want none (dockerd answers 500)", tt.name, err)
		}
	}
	if _, _, err := s.Login(ctx, mobyregistry.AuthConfig{ServerAddress: "https://%zz"}); !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), "unable to parse server address") {
		t.Errorf("bad address: %v", err)
	}
}

func TestLoginHost(t *testing.T) {
	for in, want := range map[string]string{
		"":                            "registry-1.docker.io",
		"https://index.docker.io/v1/": "registry-1.docker.io",
		"docker.io":                   "registry-1.docker.io",
		"localhost:5000":              "localhost:5000",
		"http://127.0.0.1:5000/v2/":   "127.0.0.1:5000",
	} {
		if got, err := loginHost(in); err != nil || got != want {
			t.Errorf("loginHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
