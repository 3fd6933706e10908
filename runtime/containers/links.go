package containers

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
)

// Legacy links (--link NAME[:ALIAS]), as dockerd makes them: the linked
// container must exist at create and run at start; the linking container
// then finds it under the alias, its name and its short ID in /etc/hosts,
// and, on the default bridge, in ALIAS_* environment variables naming its
// address, exposed ports and environment. dockerd resolves links on a
// user-defined network through its DNS server instead; an /etc/hosts
// entry answers the same lookups.

// link is one --link: the target as named, the alias, and the target's
// ID once bound.
type link struct{ name, alias, id string }

func parseLinks(specs []string) []link {
	out := make([]link, 0, len(specs))
	for _, s := range specs {
		name, alias, ok := strings.Cut(s, ":")
		name = strings.TrimPrefix(name, "/")
		if !ok || alias == "" {
			alias = name
		}
		// dockerd stores a link as "/target:/linker/alias".
		out = append(out, link{name: name, alias: alias[strings.LastIndex(alias, "/")+1:]})
	}
	return out
}

// linked finds a link's target, with dockerd's error when it is missing:
// by ID where the link was bound to one at create, else by name.
func (m *Manager) linked(l link) (*ctr, error) {
	ref := l.name
	if l.id != "" {
		ref = l.id
	}
	t, err := m.lookup(ref)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("could not get container for %s: %s", l.name, err.Error()))
	}
	return t, nil
}

// links are the container's links, bound to their targets' IDs where the
// record has them. Callers hold c.mu.
func (c *ctr) links() []link {
	ls := parseLinks(c.rec.HostConfig.Links)
	if len(c.rec.LinkIDs) == len(ls) {
		for i := range ls {
			ls[i].id = c.rec.LinkIDs[i]
		}
	}
	return ls
}

// shownLinks is HostConfig.Links as dockerd's inspect shows it:
// "/target:/linker/alias", the target under its current name (dockerd
// 20.10 goes on showing a removed target under the name it last had; the
// name the link was made with stands in for it). Callers hold c.mu.
func (c *ctr) shownLinks() []string {
	var out []string
	for _, l := range c.links() {
		name := l.name
		if t, err := c.m.linked(l); err == nil {
			name = c.m.targetName(l, t)
		}
		out = append(out, "/"+name+":/"+c.rec.Name+"/"+l.alias)
	}
	return out
}

// targetName is the current name of l's target t, read under the
// manager's lock (a rename changes it), or the name the link was made with
// once t is gone.
func (m *Manager) targetName(l link, t *ctr) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, other := range m.byName {
		if other == t {
			return name
		}
	}
	return l.name
}

// linkTargets refuses, at create, a link to a container that does not
// exist, and returns the IDs of the links' targets.
func (m *Manager) linkTargets(specs []string) ([]string, error) {
	var ids []string
	for _, l := range parseLinks(specs) {
		t, err := m.linked(l)
		if err != nil {
			return nil, err
		}
		ids = append(ids, t.rec.ID)
	}
	return ids, nil
}

// resolveLinks returns the /etc/hosts entries (ExtraHosts' "name:ip") and
// the environment the container's links give it. It reads only what does
// not change about the linked containers (ID, Config) and asks the
// network manager for their addresses, so it never holds their locks:
// two containers linked to each other may start at once. Callers hold
// c.mu.
func (c *ctr) resolveLinks() (hosts, env []string, err error) {
	if c.m.net == nil {
		return nil, nil, nil
	}
	own := make([]string, 0, len(c.rec.Networks))
	for name := range c.rec.Networks {
		own = append(own, name)
	}
	sort.Strings(own)
	me := strings.TrimPrefix(c.rec.Name, "/")
	for _, l := range c.links() {
		t, err := c.m.linked(l)
		if err != nil {
			return nil, nil, err
		}
		// A renamed target is found under its current name too.
		name := c.m.targetName(l, t)
		_, nets := c.m.net.Settings(t.rec.ID, nil, nil)
		var ip, via string
		for _, netName := range own {
			if ep := nets[netName]; ep != nil && ep.IPAddress.IsValid() {
				ip, via = ep.IPAddress.String(), netName
				break
			}
		}
		if ip == "" {
			if len(nets) == 0 {
				return nil, nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Cannot link to a non running container: /%s AS /%s/%s", name, me, l.alias))
			}
			return nil, nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Cannot link to /%s, as it does not belong to the default network", name))
		}
		// One line per link, as dockerd writes it: the alias, the
		// target's hostname, and its name when the alias is not it.
		names := l.alias + " " + t.rec.Config.Hostname
		if l.alias != name {
			names += " " + name
		}
		if entry := names + ":" + ip; !slices.Contains(hosts, entry) {
			hosts = append(hosts, entry)
		}
		if via == "bridge" {
			env = append(env, linkEnv(me, l.alias, ip, t.rec.Config.ExposedPorts, t.rec.Config.Env)...)
		}
	}
	return hosts, env, nil
}

// linkEnv is dockerd's environment for one legacy link.
func linkEnv(me, alias, ip string, exposed network.PortSet, targetEnv []string) []string {
	prefix := strings.ReplaceAll(strings.ToUpper(alias), "-", "_")
	env := []string{fmt.Sprintf("%s_NAME=/%s/%s", prefix, me, alias)}
	ports := make([]network.Port, 0, len(exposed))
	for p := range exposed {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool {
		if ports[i].Num() != ports[j].Num() {
			return ports[i].Num() < ports[j].Num()
		}
		return ports[i].Proto() < ports[j].Proto()
	})
	if len(ports) > 0 {
		p := ports[0]
		env = append(env, fmt.Sprintf("%s_PORT=%s://%s:%d", prefix, p.Proto(), ip, p.Num()))
	}
	for _, p := range ports {
		key := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Num(), strings.ToUpper(string(p.Proto())))
		env = append(env,
			fmt.Sprintf("%s=%s://%s:%d", key, p.Proto(), ip, p.Num()),
			fmt.Sprintf("%s_ADDR=%s", key, ip),
			fmt.Sprintf("%s_PORT=%d", key, p.Num()),
			fmt.Sprintf("%s_PROTO=%s", key, p.Proto()))
	}
	for _, kv := range targetEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "HOME" || k == "PATH" {
			continue
		}
		env = append(env, fmt.Sprintf("%s_ENV_%s=%s", prefix, k, v))
	}
	return env
}
