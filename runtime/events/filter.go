package events

import (
	"slices"
	"strings"

	"github.com/moby/moby/api/types/events"
)

// Filter selects events the way dockerd's daemon/events filter does:
// values of one key are alternatives, different keys must all match, and
// an absent key matches everything. Unknown keys are ignored, as dockerd
// 20.10 does (later versions refuse them).
type Filter struct {
	args map[string][]string
}

// NewFilter returns the filter args describe.
func NewFilter(args map[string][]string) Filter { return Filter{args: args} }

// Match reports whether m passes the filter.
func (f Filter) Match(m events.Message) bool {
	return f.matchEvent(m) &&
		f.exact("type", string(m.Type)) &&
		f.exact("scope", m.Scope) &&
		f.named(m, events.DaemonEventType) &&
		f.named(m, events.ContainerEventType) &&
		f.named(m, events.PluginEventType) &&
		f.named(m, events.VolumeEventType) &&
		f.named(m, events.NetworkEventType) &&
		f.named(m, events.NodeEventType) &&
		f.named(m, events.ServiceEventType) &&
		f.named(m, events.SecretEventType) &&
		f.named(m, events.ConfigEventType) &&
		f.matchImage(m) &&
		f.matchLabels(m.Actor.Attributes)
}

// matchEvent: a filter on an action that carries a suffix ("exec_start:
// sh", "health_status: healthy") given without it matches by prefix.
func (f Filter) matchEvent(m events.Message) bool {
	for _, v := range f.args["event"] {
		switch events.Action(v) {
		case events.ActionHealthStatus, events.ActionExecCreate, events.ActionExecStart:
			return f.fuzzy("event", string(m.Action))
		}
	}
	return f.exact("event", string(m.Action))
}

// named matches the filter key typ (e.g. "container") against the actor's
// ID prefix or its name, whatever the event's type, as dockerd does.
func (f Filter) named(m events.Message, typ events.Type) bool {
	k := string(typ)
	return f.fuzzy(k, m.Actor.ID) || f.fuzzy(k, m.Actor.Attributes["name"])
}

// matchImage matches "image" against an image event's actor or a container
// event's image, each with and without its tag.
func (f Filter) matchImage(m events.Message) bool {
	var id, name string
	switch m.Type {
	case events.ImageEventType:
		id, name = m.Actor.ID, m.Actor.Attributes["name"]
	case events.ContainerEventType:
		id, name = m.Actor.ID, m.Actor.Attributes["image"]
	default:
		name = m.Actor.Attributes["image"]
	}
	return f.exact("image", id) || f.exact("image", name) ||
		f.exact("image", stripTag(id)) || f.exact("image", stripTag(name))
}

// matchLabels takes "key" and "key=value" filters.
func (f Filter) matchLabels(attrs map[string]string) bool {
	want, ok := f.args["label"]
	if !ok {
		return true
	}
	for _, l := range want {
		k, v, hasValue := strings.Cut(l, "=")
		got, present := attrs[k]
		if !present || (hasValue && got != v) {
			return false
		}
	}
	return true
}

func (f Filter) exact(k, v string) bool {
	vs, ok := f.args[k]
	return !ok || slices.Contains(vs, v)
}

func (f Filter) fuzzy(k, v string) bool {
	vs, ok := f.args[k]
	if !ok {
		return true
	}
	for _, want := range vs {
		if v == want || (v != "" && strings.HasPrefix(v, want)) {
			return true
		}
	}
	return false
}

// stripTag drops ":tag" from a reference, leaving a registry's port alone.
func stripTag(ref string) string {
	if strings.Contains(ref, "@") || strings.HasPrefix(ref, "sha256:") {
		return ref
	}
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref
	}
	return ref[:i]
}
