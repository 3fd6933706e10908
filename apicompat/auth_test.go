package apicompat

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/moby/moby/api/types/registry"
)

// authImages is fakeImages that checks one password.
type authImages struct {
	fakeImages
	got registry.AuthConfig
}

func (a *authImages) Login(_ context.Context, cfg registry.AuthConfig) (string, string, error) {
	a.got = cfg
	if cfg.Password != "s3cret" {
		return "", "", errors.New("login attempt to http://reg/v2/ failed with status: 401 Unauthorized")
	}
	return "Login Succeeded", "", nil
}

func TestPostAuth(t *testing.T) {
	imgs := &authImages{}
	srv := httptest.NewServer(New(Config{Images: imgs, Containers: newFakeContainers(), System: fakeSystem{}}))
	t.Cleanup(srv.Close)
	env := &testEnv{srv: srv}
	for _, tt := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"username":"u","password":"s3cret","serveraddress":"reg"}`, 200, `{"Status":"Login Succeeded"}` + "\n"},
		{`{"username":"u","password":"nope","serveraddress":"reg"}`, 500, jsonError("login attempt to http://reg/v2/ failed with status: 401 Unauthorized")},
	} {
		r := env.do(t, "POST", "/v1.50/auth", tt.body, jsonCT)
		if r.status != tt.status || r.body != tt.want {
			t.Errorf("POST /auth %s = %d %q, want %d %q", tt.body, r.status, r.body, tt.status, tt.want)
		}
	}
	if imgs.got.Username != "u" || imgs.got.ServerAddress != "reg" {
		t.Errorf("backend got %+v", imgs.got)
	}
	// Without the capability the route says so.
	plain := httptest.NewServer(New(Config{Images: &fakeImages{}, Containers: newFakeContainers(), System: fakeSystem{}}))
	t.Cleanup(plain.Close)
	if r := (&testEnv{srv: plain}).do(t, "POST", "/v1.50/auth", `{}`, jsonCT); r.status != http.StatusNotImplemented {
		t.Errorf("POST /auth without a backend = %d %s", r.status, r.body)
	}
}
