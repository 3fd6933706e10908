package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
)

// RegistryBinary is where Debian's docker-registry package installs the
// registry.
const RegistryBinary = "/usr/bin/docker-registry"

// Registry is a docker-registry serving plain HTTP, without auth, on
// 127.0.0.1 inside a namespace.
type Registry struct {
	// Host is "127.0.0.1:<port>", valid only inside the namespace.
	Host    string
	LogPath string
	ns      *Netns
	proc    *process
}

// StartRegistry starts a registry inside ns with its storage and log under
// dir, and waits until it answers /v2/.
func StartRegistry(ctx context.Context, ns *Netns, dir string) (*Registry, error) {
	return startRegistry(ctx, ns, dir, "", http.StatusOK)
}

// startRegistry starts a registry with extra appended to its
// configuration; it is ready when GET /v2/ answers readyStatus.
func startRegistry(ctx context.Context, ns *Netns, dir, extra string, readyStatus int) (*Registry, error) {
	port, err := ns.FreePort()
	if err != nil {
		return nil, err
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	config := fmt.Sprintf(`version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "storage"), host) + extra
	configPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("write registry config: %w", err)
	}
	r := &Registry{Host: host, LogPath: filepath.Join(dir, "registry.log"), ns: ns}
	r.proc, err = startProcess(ns.Command(RegistryBinary, "serve", configPath), r.LogPath)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: ns.Transport()}
	err = waitFor(ctx, r.proc, "docker-registry", func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != readyStatus {
			return fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		if serr := r.proc.stop(context.Background()); serr != nil {
			err = fmt.Errorf("%w (and %v)", err, serr)
		}
		return nil, fmt.Errorf("%w; see %s", err, r.LogPath)
	}
	return r, nil
}

// Transport returns an HTTP transport that reaches the registry.
func (r *Registry) Transport() http.RoundTripper { return r.ns.Transport() }

// Close stops the registry.
func (r *Registry) Close(ctx context.Context) error { return r.proc.stop(ctx) }
