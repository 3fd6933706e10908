package imagebuild

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/moby/moby/api/types/registry"
)

// Docker Hub's names: logins name the index, images live on the registry.
const (
	indexHostname      = "index.docker.io"
	defaultV2Registry  = "registry-1.docker.io"
	loginStatusSuccess = "Login Succeeded"
)

// Login checks credentials against a registry (POST /auth, docker login)
// the way dockerd does: the registry's /v2/ is pinged (over HTTPS, then
// plain HTTP for an insecure registry) for its challenge, and fetched
// again with the credentials, answered as the challenge asks (basic, or
// a bearer token from the realm). It returns dockerd's status line and
// the identity token, which only an OAuth token service gives (none
// here). Nothing is stored: the CLI keeps the credentials and sends them
// with each pull and push.
func (s *Service) Login(ctx context.Context, cfg registry.AuthConfig) (status, identityToken string, err error) {
	host, err := loginHost(cfg.ServerAddress)
	if err != nil {
		return "", "", err
	}
	var opts []name.Option
	if s.insecure(host) {
		opts = append(opts, name.Insecure)
	}
	reg, err := name.NewRegistry(host, opts...)
	if err != nil {
		return "", "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("unable to parse server address: %v", err))
	}
	base := s.registryTransport()
	challenge, err := transport.Ping(ctx, reg, base)
	if err != nil {
		return "", "", pingError(err, s.insecure(host))
	}
	endpoint := "https://" + host + "/v2/"
	if challenge.Insecure {
		endpoint = "http://" + host + "/v2/"
	}
	rt, err := transport.NewWithContext(ctx, reg, authenticator(&cfg), base, nil)
	if err != nil {
		// A token service that refused the credentials.
		return "", "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, http.NoBody)
	if err != nil {
		return "", "", fmt.Errorf("login request to %s: %w", endpoint, err)
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return "", "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// dockerd's words, and like dockerd's an unclassified error: a
		// registry's refusal is not the daemon's client error.
		return "", "", fmt.Errorf("login attempt to %s failed with status: %d %s", endpoint, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return loginStatusSuccess, "", nil
}

// loginHost is the registry host a login's server address names: the
// host of "https://host/..." or "host[:port]", and for Docker Hub's index
// (also the default) the registry that serves it.
func loginHost(serverAddress string) (string, error) {
	if serverAddress == "" {
		return defaultV2Registry, nil
	}
	if !strings.HasPrefix(serverAddress, "https://") && !strings.HasPrefix(serverAddress, "http://") {
		serverAddress = "https://" + serverAddress
	}
	u, err := url.Parse(serverAddress)
	if err != nil || u.Host == "" {
		msg := "unable to parse server address"
		if err != nil {
			msg += ": " + err.Error()
		}
		return "", errdefs.ErrInvalidArgument.WithMessage(msg)
	}
	switch u.Host {
	case indexHostname, "docker.io":
		return defaultV2Registry, nil
	}
	return u.Host, nil
}
