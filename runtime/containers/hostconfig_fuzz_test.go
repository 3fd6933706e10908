package containers

import (
	"encoding/json"
	"net/http"
	"path"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs/pkg/errhttp"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
)

// FuzzHostConfig feeds the translation of a create request's host config
// (restart policy, stop signal, memory and CPUs, -v, --mount, --tmpfs and
// image volumes) arbitrary JSON, as the API layer decodes it. An error
// must be a client error (4xx, or 501 for what husk does not do); a plan
// must have clean, absolute, distinct destinations, parents first, and
// absolute bind sources. Seeds are in testdata/fuzz/FuzzHostConfig.
func FuzzHostConfig(f *testing.F) {
	f.Add([]byte(`{"Image":"a","Volumes":{"/data":{}},"StopSignal":"SIGUSR1","HostConfig":{"Binds":["/h:/c:ro","v:/v"],"Tmpfs":{"/run":"size=1m"},"Mounts":[{"Type":"bind","Source":"/h","Target":"/m","BindOptions":{"CreateMountpoint":true}}],"Memory":1073741824,"NanoCPUs":1500000000,"RestartPolicy":{"Name":"on-failure","MaximumRetryCount":2}}}`))
	f.Add([]byte(`{"Image":"a","HostConfig":{"Mounts":[{"Type":"tmpfs","Target":"/t","TmpfsOptions":{"SizeBytes":-1,"Mode":4294967295,"Options":[["exec"],["a","b","c"]]}}]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req container.CreateRequest
		if json.Unmarshal(body, &req) != nil || req.Config == nil {
			return
		}
		hc := req.HostConfig
		if hc == nil {
			hc = &container.HostConfig{}
		}
		clientError := func(what string, err error) {
			t.Helper()
			if s := errhttp.ToHTTP(err); s < 400 || s >= 500 && s != http.StatusNotImplemented {
				t.Fatalf("%s: %v is a %d, want a client error", what, err, s)
			}
		}
		if err := container.ValidateRestartPolicy(hc.RestartPolicy); err != nil {
			return
		}
		if sig, err := ParseSignal(req.Config.StopSignal, syscall.SIGTERM); err != nil {
			clientError("stop signal", err)
		} else if sig == 0 {
			t.Fatalf("stop signal %q gave %d", req.Config.StopSignal, sig)
		}
		if m := memoryMiB(hc, 256, 0); m < minGuestMiB {
			t.Fatalf("memory %d gave %d MiB", hc.Memory, m)
		}
		if err := validateNanoCPUs(hc.NanoCPUs); err != nil {
			clientError("cpus", err)
		} else if n := cpus(hc, 1); n < 1 || n > runtime.NumCPU() {
			t.Fatalf("NanoCPUs %d gave %d vCPUs", hc.NanoCPUs, n)
		}
		if n := cpus(hc, 1); n < 1 {
			t.Fatalf("NanoCPUs %d gave %d vCPUs", hc.NanoCPUs, n)
		}
		mounts, err := planMounts(req.Config, hc, nil, func(p string) bool { return strings.HasPrefix(p, "/exists") })
		if err != nil {
			clientError("mounts", err)
			return
		}
		seen := map[string]bool{}
		last := 0
		for _, m := range mounts {
			d := m.Destination
			if !path.IsAbs(d) || path.Clean(d) != d || d == "/" || seen[d] {
				t.Fatalf("destination %q in %+v", d, mounts)
			}
			seen[d] = true
			if n := depth(d); n < last {
				t.Fatalf("%q comes after a deeper mount in %+v", d, mounts)
			} else {
				last = n
			}
			if m.Type == mount.TypeBind && (!path.IsAbs(m.Source) || path.Clean(m.Source) != m.Source) {
				t.Fatalf("bind source %q", m.Source)
			}
		}
	})
}
