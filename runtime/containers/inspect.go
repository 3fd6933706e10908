package containers

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
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

// List answers GET /containers/json.
func (m *Manager) List(ctx context.Context, opts ListOptions) ([]container.Summary, error) {
	f, err := newFilter(opts.Filters)
	if err != nil {
		return nil, err
	}
	all := m.all()
	var out []container.Summary
	// created is each listed container's creation time to the
	// nanosecond: the summary's Created is whole seconds, and two
	// containers created within one second must still list newest first.
	created := map[string]time.Time{}
	now := time.Now()
	for _, c := range all {
		c.mu.Lock()
		rec := c.rec
		netSettings := c.networkSettings()
		c.mu.Unlock()
		if !opts.All && !rec.State.Running && len(f["status"]) == 0 && len(f["exited"]) == 0 {
			continue
		}
		if !f.match(rec) {
			continue
		}
		created[rec.ID] = rec.Created
		out = append(out, container.Summary{
			ID: rec.ID, Names: []string{"/" + rec.Name}, Image: rec.Image, ImageID: rec.ImageID,
			Command: strings.TrimSpace(rec.Path + " " + strings.Join(rec.Args, " ")),
			Created: rec.Created.Unix(), Ports: portSummaries(netSettings.Ports), Labels: labelsOf(rec.Config),
			State: rec.State.Status, Status: statusText(rec.State, now),
			HostConfig: struct {
				NetworkMode string            `json:",omitempty"`
				Annotations map[string]string `json:",omitempty"`
			}{NetworkMode: string(rec.HostConfig.NetworkMode)},
			NetworkSettings: &container.NetworkSettingsSummary{Networks: netSettings.Networks},
			Mounts:          mountPoints(rec.Mounts),
		})
	}
	// Newest first, as dockerd lists them.
	sort.Slice(out, func(i, j int) bool {
		ci, cj := created[out[i].ID], created[out[j].ID]
		return ci.After(cj) || ci.Equal(cj) && out[i].ID < out[j].ID
	})
	if opts.Limit > 0 && len(out) > opts.Limit {
		out = out[:opts.Limit]
	}
	if opts.Size {
		m.fillSizes(ctx, out)
	}
	if out == nil {
		out = []container.Summary{}
	}
	return out, nil
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
type filter map[string][]string

var containerFilters = map[string]bool{"id": true, "name": true, "status": true, "label": true, "exited": true, "ancestor": true, "health": true}

func newFilter(raw map[string][]string) (filter, error) {
	for k := range raw {
		if !containerFilters[k] {
			return nil, errdefs.ErrInvalidArgument.WithMessage("invalid filter '" + k + "'")
		}
	}
	for _, s := range raw["status"] {
		switch container.ContainerState(s) {
		case container.StateCreated, container.StateRunning, container.StatePaused, container.StateRestarting,
			container.StateRemoving, container.StateExited, container.StateDead:
		default:
			return nil, errdefs.ErrInvalidArgument.WithMessage("invalid filter 'status=" + s + "'")
		}
	}
	if err := validateHealthFilter(raw["health"]); err != nil {
		return nil, err
	}
	for _, s := range raw["exited"] {
		if _, err := strconv.Atoi(s); err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage("invalid filter 'exited=" + s + "'")
		}
	}
	return filter(raw), nil
}

func (f filter) match(rec Record) bool {
	any := func(key string, ok func(string) bool) bool {
		vals := f[key]
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
		allLabels(f["label"], labelsOf(rec.Config))
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
