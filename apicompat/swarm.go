package apicompat

import (
	"context"
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"
)

// Swarm mode and managed plugins are dockerd features husk does not have.
// Their routes answer as a dockerd outside any swarm and without plugins
// does, so `docker node ls`, `docker service ls`, `docker secret ls` or
// `docker plugin ls` read the same on both instead of "page not found";
// only joining or creating a swarm and installing a plugin, which dockerd
// would do, are refused as not implemented.

// errNotSwarmManager is dockerd's answer to every swarm route on a node
// that is not a swarm manager.
var errNotSwarmManager = errdefs.ErrUnavailable.WithMessage(`This node is not a swarm manager. Use "docker swarm init" or "docker swarm join" to connect this node to swarm and try again.`)

// errNotInSwarm is dockerd's answer to leaving a swarm the
// node is not part of.
var errNotInSwarm = errdefs.ErrUnavailable.WithMessage("This node is not part of a swarm")

func (s *server) initSwarmRoutes() {
	refuse := func(err error) apiFunc {
		return func(context.Context, http.ResponseWriter, *http.Request, map[string]string) error { return err }
	}
	noSwarm := errdefs.ErrNotImplemented.WithMessage("swarm mode is not supported by husk")
	s.handle(http.MethodPost, "/swarm/init", refuse(noSwarm))
	s.handle(http.MethodPost, "/swarm/join", refuse(noSwarm))
	s.handle(http.MethodPost, "/swarm/leave", refuse(errNotInSwarm))
	s.handle(http.MethodPost, "/swarm/unlock", refuse(errNotSwarmManager))
	s.handle(http.MethodGet, "/swarm", refuse(errNotSwarmManager))
	s.handle(http.MethodGet, "/swarm/unlockkey", refuse(errNotSwarmManager))
	s.handle(http.MethodPost, "/swarm/update", refuse(errNotSwarmManager))
	// Only cluster volumes, a swarm feature, can be updated.
	s.handle(http.MethodPut, "/volumes/{name}", refuse(errdefs.ErrUnavailable.WithMessage("volume update only valid for cluster volumes, but swarm is unavailable")))
	for _, kind := range []string{"/nodes", "/services", "/tasks", "/secrets", "/configs"} {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			s.handle(method, kind, refuse(errNotSwarmManager))
			s.handle(method, kind+"/{name}", refuse(errNotSwarmManager))
		}
	}

	s.handle(http.MethodGet, "/plugins", s.listPlugins)
	noPlugins := errdefs.ErrNotImplemented.WithMessage("plugins are not supported by husk")
	s.handle(http.MethodGet, "/plugins/privileges", refuse(noPlugins))
	s.handle(http.MethodPost, "/plugins/pull", refuse(noPlugins))
	s.handle(http.MethodPost, "/plugins/create", refuse(noPlugins))
	s.handle(http.MethodGet, "/plugins/{name}/json", noPlugin)
	s.handle(http.MethodDelete, "/plugins/{name}", noPlugin)
	for _, action := range []string{"enable", "disable", "push", "set", "upgrade"} {
		s.handle(http.MethodPost, "/plugins/{name}/"+action, noPlugin)
	}
}

func (s *server) listPlugins(_ context.Context, w http.ResponseWriter, _ *http.Request, _ map[string]string) error {
	return writeJSON(w, http.StatusOK, []struct{}{})
}

// noPlugin is dockerd's answer for a plugin it does not have: here, any.
func noPlugin(_ context.Context, _ http.ResponseWriter, _ *http.Request, vars map[string]string) error {
	return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("plugin %q not found", vars["name"]))
}
