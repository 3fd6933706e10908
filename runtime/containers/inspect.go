package containers

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
)

// Inspect answers GET /containers/{id}/json.
func (m *Manager) Inspect(ctx context.Context, ref string) (container.InspectResponse, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return container.InspectResponse{}, err
	}
	// Before c.mu: an exec start holds its own lock while it takes c.mu.
	execIDs := m.execs.running(c)
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.rec
	state := rec.State
	cfg := *rec.Config
	hc := *rec.HostConfig
	hc.Links = c.shownLinks()
	// The logs are stored in dockerd's json-file format; clients such as
	// docker-py read the driver from here to decide whether logs exist.
	if hc.LogConfig.Type == "" {
		hc.LogConfig.Type = logDriverJSONFile
	}
	if hc.LogConfig.Config == nil {
		hc.LogConfig.Config = map[string]string{}
	}
	return container.InspectResponse{
		ID:              rec.ID,
		Created:         rec.Created.Format(time.RFC3339Nano),
		Path:            rec.Path,
		Args:            rec.Args,
		State:           &state,
		Image:           rec.ImageID,
		LogPath:         c.logPath(),
		Name:            "/" + rec.Name,
		Driver:          "husk-ext4",
		Platform:        "linux",
		HostConfig:      &hc,
		Mounts:          mountPoints(rec.Mounts),
		Config:          &cfg,
		ExecIDs:         execIDs,
		RestartCount:    rec.RestartCount,
		NetworkSettings: c.networkSettings(),
	}, nil
}

// List answers GET /containers/json. It walks the containers newest
// first, as dockerd's list does, because the before and since filters and
// the limit are positions in that order.
func (m *Manager) List(ctx context.Context, opts ListOptions) ([]container.Summary, error) {
	f, err := newFilter(opts.Filters)
	if err != nil {
		return nil, err
	}
	type listed struct {
		rec         Record
		netSettings *container.NetworkSettings
	}
	var all []listed
	for _, c := range m.all() {
		c.mu.Lock()
		all = append(all, listed{rec: c.rec, netSettings: c.networkSettings()})
		c.mu.Unlock()
	}
	// Created is kept to the nanosecond: two containers created within
	// one second must still list newest first.
	sort.Slice(all, func(i, j int) bool {
		ci, cj := all[i].rec.Created, all[j].rec.Created
		return ci.After(cj) || ci.Equal(cj) && all[i].rec.ID < all[j].rec.ID
	})
	recs := make([]Record, len(all))
	for i, l := range all {
		recs[i] = l.rec
	}
	before, err := f.position("before", recs)
	if err != nil {
		return nil, err
	}
	since, err := f.position("since", recs)
	if err != nil {
		return nil, err
	}
	// A status filter lists stopped containers without --all; so does a
	// limit (docker ps -n, -l), as in dockerd.
	withStopped := opts.All || opts.Limit > 0 || len(f.args["status"]) > 0
	out := []container.Summary{}
	current := m.imageRefs(ctx)
	now := time.Now()
	for _, l := range all {
		rec := l.rec
		if before != "" {
			if rec.ID == before {
				before = ""
			}
			continue
		}
		if rec.ID == since {
			break
		}
		if !withStopped && !rec.State.Running {
			continue
		}
		s := container.Summary{
			ID: rec.ID, Names: []string{"/" + rec.Name}, Image: rec.Image, ImageID: rec.ImageID,
			Command: psCommand(rec.Path, rec.Args),
			Created: rec.Created.Unix(), Ports: portSummaries(l.netSettings.Ports), Labels: labelsOf(rec.Config),
			State: rec.State.Status, Status: statusText(rec.State, now),
			HostConfig: struct {
				NetworkMode string            `json:",omitempty"`
				Annotations map[string]string `json:",omitempty"`
			}{NetworkMode: string(rec.HostConfig.NetworkMode)},
			NetworkSettings: &container.NetworkSettingsSummary{Networks: l.netSettings.Networks},
			Mounts:          mountPoints(rec.Mounts),
		}
		if !f.match(rec, s) {
			continue
		}
		s.Image = current(rec.Image, rec.ImageID)
		out = append(out, s)
		if opts.Limit > 0 && len(out) == opts.Limit {
			break
		}
	}
	if opts.Size {
		m.fillSizes(ctx, out)
	}
	return out, nil
}

// imageRefs gives the IMAGE docker ps shows for a container: the
// reference it was created from while that still names its image, and
// the image's ID once the reference is gone or names another image, as
// dockerd's refreshImage does. Lookups are cached for one listing. It
// holds no container lock: the image store calls back into the manager
// with its own held.
func (m *Manager) imageRefs(ctx context.Context) func(ref, id string) string {
	seen := map[string]string{}
	return func(ref, id string) string {
		if m.images == nil || ref == id {
			return ref
		}
		now, ok := seen[ref]
		if !ok {
			if img, err := m.images.Resolve(ctx, ref); err == nil {
				now = img.ID
			}
			seen[ref] = now
		}
		if now != id {
			return id
		}
		return ref
	}
}

// psCommand is docker ps's COMMAND as dockerd builds it: the arguments
// that hold a space are put in single quotes.
func psCommand(path string, args []string) string {
	if len(args) == 0 {
		return path
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		if strings.Contains(a, " ") {
			a = "'" + a + "'"
		}
		quoted[i] = a
	}
	return path + " " + strings.Join(quoted, " ")
}

func labelsOf(cfg *container.Config) map[string]string {
	if cfg == nil || cfg.Labels == nil {
		return map[string]string{}
	}
	return cfg.Labels
}

// statusText is the STATUS column of `docker ps`.
func statusText(s container.State, now time.Time) string {
	switch s.Status {
	case container.StateRunning:
		return "Up " + humanDuration(now.Sub(parseTime(s.StartedAt))) + healthText(s.Health)
	case container.StateExited:
		return fmt.Sprintf("Exited (%d) %s ago", s.ExitCode, humanDuration(now.Sub(parseTime(s.FinishedAt))))
	case container.StateCreated:
		return "Created"
	case container.StateRestarting:
		return fmt.Sprintf("Restarting (%d) %s ago", s.ExitCode, humanDuration(now.Sub(parseTime(s.FinishedAt))))
	case container.StatePaused:
		return "Up " + humanDuration(now.Sub(parseTime(s.StartedAt))) + " (Paused)"
	case container.StateDead:
		return "Dead"
	}
	return string(s.Status)
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// humanDuration words a duration as go-units' HumanDuration, which dockerd
// uses for the STATUS column.
func humanDuration(d time.Duration) string {
	switch seconds := int(d.Seconds()); {
	case seconds < 1:
		return "Less than a second"
	case seconds == 1:
		return "1 second"
	case seconds < 60:
		return fmt.Sprintf("%d seconds", seconds)
	}
	switch minutes := int(d.Minutes()); {
	case minutes == 1:
		return "About a minute"
	case minutes < 60:
		return fmt.Sprintf("%d minutes", minutes)
	}
	switch hours := int(d.Hours() + 0.5); {
	case hours == 1:
		return "About an hour"
	case hours < 48:
		return fmt.Sprintf("%d hours", hours)
	case hours < 24*7*2:
		return fmt.Sprintf("%d days", hours/24)
	case hours < 24*30*2:
		return fmt.Sprintf("%d weeks", hours/24/7)
	case hours < 24*365*2:
		return fmt.Sprintf("%d months", hours/24/30)
	default:
		return fmt.Sprintf("%d years", int(d.Hours())/24/365)
	}
}

// filter is the parsed `filters` query of GET /containers/json.
type filter struct {
	args map[string][]string
	// ports are the publish and expose filters, parsed once.
	ports map[string][]network.PortRange
}

// containerFilters are the keys dockerd's list accepts. isolation is
// Windows' alone: on Linux it matches every container, as in dockerd.
var containerFilters = map[string]bool{
	"id": true, "name": true, "status": true, "label": true, "exited": true, "ancestor": true, "health": true,
	"before": true, "since": true, "volume": true, "network": true, "publish": true, "expose": true,
	"is-task": true, "isolation": true,
}

func newFilter(raw map[string][]string) (filter, error) {
	for k := range raw {
		if !containerFilters[k] {
			return filter{}, errdefs.ErrInvalidArgument.WithMessage("invalid filter '" + k + "'")
		}
	}
	for _, s := range raw["status"] {
		switch container.ContainerState(s) {
		case container.StateCreated, container.StateRunning, container.StatePaused, container.StateRestarting,
			container.StateRemoving, container.StateExited, container.StateDead:
		default:
			return filter{}, errdefs.ErrInvalidArgument.WithMessage("invalid filter 'status=" + s + "'")
		}
	}
	if err := validateHealthFilter(raw["health"]); err != nil {
		return filter{}, err
	}
	for _, s := range raw["exited"] {
		if _, err := strconv.Atoi(s); err != nil {
			return filter{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter 'exited=%s': %v", s, err))
		}
	}
	if vals := raw["is-task"]; len(vals) > 0 {
		// dockerd's GetBoolOrDefault: one truth, stated in either form.
		isTrue := slices.Contains(vals, "true") || slices.Contains(vals, "1")
		isFalse := slices.Contains(vals, "false") || slices.Contains(vals, "0")
		if isTrue == isFalse {
			return filter{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter 'is-task=%s'", vals))
		}
	}
	f := filter{args: raw, ports: map[string][]network.PortRange{}}
	for _, key := range []string{"publish", "expose"} {
		for _, v := range raw[key] {
			pr, err := parsePortFilter(key, v)
			if err != nil {
				return filter{}, err
			}
			f.ports[key] = append(f.ports[key], pr)
		}
	}
	return f, nil
}

// parsePortFilter reads a publish or expose filter: a port or a range,
// with or without a protocol (tcp by default), as dockerd's portOp does.
func parsePortFilter(key, v string) (network.PortRange, error) {
	if strings.Contains(v, ":") {
		return network.PortRange{}, fmt.Errorf("filter for '%s' should not contain ':': %s", key, v)
	}
	pr, err := network.ParsePortRange(v)
	if err != nil {
		return network.PortRange{}, fmt.Errorf("error while looking up for %s %s: %w", key, v, err)
	}
	return pr, nil
}

// position resolves the before or since filter to the ID of the container
// it names (the last value wins, as in dockerd): a full ID, a name, or a
// unique ID prefix. recs are the containers to look among.
func (f filter) position(key string, recs []Record) (string, error) {
	vals := f.args[key]
	if len(vals) == 0 {
		return "", nil
	}
	v := vals[len(vals)-1]
	name := strings.TrimPrefix(v, "/")
	var byPrefix []string
	for _, rec := range recs {
		if rec.ID == v || rec.Name == name {
			return rec.ID, nil
		}
		if strings.HasPrefix(rec.ID, v) {
			byPrefix = append(byPrefix, rec.ID)
		}
	}
	if len(byPrefix) == 1 {
		return byPrefix[0], nil
	}
	return "", errdefs.ErrNotFound.WithMessage("no such container " + v)
}

func (f filter) match(rec Record, s container.Summary) bool {
	any := func(key string, ok func(string) bool) bool {
		vals := f.args[key]
		if len(vals) == 0 {
			return true
		}
		for _, v := range vals {
			if ok(v) {
				return true
			}
		}
		return false
	}
	return any("id", func(v string) bool { return strings.HasPrefix(rec.ID, v) }) &&
		any("name", func(v string) bool { return matchName(v, rec.Name) }) &&
		any("status", func(v string) bool { return string(rec.State.Status) == v }) &&
		any("exited", func(v string) bool {
			n, _ := strconv.Atoi(v)
			return rec.State.Status == container.StateExited && rec.State.ExitCode == n
		}) &&
		any("ancestor", func(v string) bool {
			return rec.Image == v || rec.ImageID == v || strings.HasPrefix(strings.TrimPrefix(rec.ImageID, "sha256:"), v)
		}) &&
		any("health", func(v string) bool { return healthFilterValue(rec.State) == v }) &&
		// No container of husk's is a swarm task.
		any("is-task", func(v string) bool { return v == "false" || v == "0" }) &&
		any("volume", func(v string) bool {
			return slices.ContainsFunc(s.Mounts, func(mp container.MountPoint) bool {
				id := mp.Name
				if id == "" {
					id = mp.Source
				}
				return v == id || v == mp.Destination
			})
		}) &&
		any("network", func(v string) bool {
			if s.NetworkSettings == nil {
				return false
			}
			if _, ok := s.NetworkSettings.Networks[v]; ok {
				return true
			}
			for _, ep := range s.NetworkSettings.Networks {
				if ep != nil && strings.HasPrefix(ep.NetworkID, v) {
					return true
				}
			}
			return false
		}) &&
		// dockerd keeps a container if any of its ports is one a publish
		// or an expose filter names.
		(len(f.ports["publish"])+len(f.ports["expose"]) == 0 || slices.ContainsFunc(s.Ports, func(p container.PortSummary) bool {
			return f.portIn("publish", p.PublicPort, p.Type) || f.portIn("expose", p.PrivatePort, p.Type)
		})) &&
		allLabels(f.args["label"], labelsOf(rec.Config))
}

// portIn reports whether port/proto is in a range the key's filters name.
func (f filter) portIn(key string, port uint16, proto string) bool {
	return slices.ContainsFunc(f.ports[key], func(pr network.PortRange) bool {
		return string(pr.Proto()) == proto && pr.Start() <= port && port <= pr.End()
	})
}

// allLabels: every label filter ("k" or "k=v") must match.
func allLabels(want []string, have map[string]string) bool {
	for _, w := range want {
		k, v, hasValue := strings.Cut(w, "=")
		got, ok := have[k]
		if !ok || hasValue && got != v {
			return false
		}
	}
	return true
}

// matchName applies a name filter: a regular expression, as dockerd's, over
// the name with or without its leading "/".
func matchName(pattern, name string) bool {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return strings.Contains(name, strings.TrimPrefix(pattern, "/"))
	}
	return re.MatchString(name) || re.MatchString("/"+name)
}
