package apicompat

import (
	"context"
	"net/http"
	"os"
	"runtime"
	"strconv"

	"github.com/moby/moby/api/types/swarm"
	"github.com/moby/moby/api/types/system"
	"golang.org/x/sys/unix"
)

// ping is GET and HEAD /_ping. Builder-Version "1" is the classic builder
// (POST /build), the only one this daemon offers; Swarm is never active.
func (s *server) ping(_ context.Context, w http.ResponseWriter, r *http.Request, _ map[string]string) error {
	h := w.Header()
	h.Add("Cache-Control", "no-cache, no-store, must-revalidate")
	h.Add("Pragma", "no-cache")
	h.Set("Builder-Version", "1")
	h.Set("Swarm", string(swarm.LocalNodeStateInactive))
	if r.Method == http.MethodHead {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Content-Length", "0")
		return nil
	}
	_, err := w.Write([]byte("OK"))
	return err
}

// uname answers the kernel release and machine ("x86_64"), which dockerd
// reports as KernelVersion and Info.Architecture.
func uname() (release, machine string) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", ""
	}
	return unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Machine[:])
}

// getVersion is GET /version: the backend's answer, with what the API
// server itself knows filled in where the backend left it empty.
func (s *server) getVersion(ctx context.Context, w http.ResponseWriter, _ *http.Request, _ map[string]string) error {
	v, err := s.cfg.System.Version(ctx)
	if err != nil {
		return err
	}
	kernel, _ := uname()
	setDefault(&v.Version, s.cfg.Version)
	setDefault(&v.APIVersion, s.cfg.APIVersion)
	setDefault(&v.MinAPIVersion, s.cfg.MinAPIVersion)
	setDefault(&v.Os, runtime.GOOS)
	setDefault(&v.Arch, runtime.GOARCH)
	setDefault(&v.GoVersion, runtime.Version())
	setDefault(&v.KernelVersion, kernel)
	v.Experimental = true
	if len(v.Components) == 0 {
		details := map[string]string{
			"ApiVersion":    v.APIVersion,
			"MinAPIVersion": v.MinAPIVersion,
			"GoVersion":     v.GoVersion,
			"Os":            v.Os,
			"Arch":          v.Arch,
			"KernelVersion": v.KernelVersion,
			"Experimental":  strconv.FormatBool(v.Experimental),
		}
		if v.GitCommit != "" {
			details["GitCommit"] = v.GitCommit
		}
		if v.BuildTime != "" {
			details["BuildTime"] = v.BuildTime
		}
		v.Components = append(v.Components, system.ComponentVersion{Name: "Engine", Version: v.Version, Details: details})
	}
	return writeJSON(w, http.StatusOK, v)
}

// getInfo is GET /info, filled in like getVersion.
func (s *server) getInfo(ctx context.Context, w http.ResponseWriter, _ *http.Request, _ map[string]string) error {
	info, err := s.cfg.System.Info(ctx)
	if err != nil {
		return err
	}
	kernel, machine := uname()
	host, _ := os.Hostname()
	setDefault(&info.ServerVersion, s.cfg.Version)
	setDefault(&info.OSType, runtime.GOOS)
	setDefault(&info.Architecture, machine)
	setDefault(&info.KernelVersion, kernel)
	setDefault(&info.Name, host)
	setDefault(&info.IndexServerAddress, "https://index.docker.io/v1/")
	if info.NCPU == 0 {
		info.NCPU = runtime.NumCPU()
	}
	if info.Swarm.LocalNodeState == "" {
		info.Swarm.LocalNodeState = swarm.LocalNodeStateInactive
	}
	info.ExperimentalBuild = true
	return writeJSON(w, http.StatusOK, info)
}

func setDefault(field *string, value string) {
	if *field == "" {
		*field = value
	}
}
