package containers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
)

func TestMergeImageConfig(t *testing.T) {
	img := v1.Config{
		Cmd: []string{"sh"}, Entrypoint: []string{"/entry"}, Env: []string{"PATH=/bin", "A=img"},
		User: "app", WorkingDir: "/work", Labels: map[string]string{"k": "img", "only": "img"}, StopSignal: "SIGQUIT",
	}
	tests := []struct {
		name           string
		user           container.Config
		wantEntrypoint []string
		wantCmd        []string
		wantUser       string
		wantWorkdir    string
	}{
		{"image defaults", container.Config{}, []string{"/entry"}, []string{"sh"}, "app", "/work"},
		{"cmd override keeps entrypoint", container.Config{Cmd: []string{"ls"}}, []string{"/entry"}, []string{"ls"}, "app", "/work"},
		{"entrypoint override drops image cmd", container.Config{Entrypoint: []string{"/other"}}, []string{"/other"}, nil, "app", "/work"},
		{"--entrypoint '' clears it", container.Config{Entrypoint: []string{""}, Cmd: []string{"id"}}, nil, []string{"id"}, "app", "/work"},
		{"user and workdir override", container.Config{User: "0:0", WorkingDir: "/tmp"}, []string{"/entry"}, []string{"sh"}, "0:0", "/tmp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mergeImageConfig(&tt.user, img)
			if !slices.Equal(got.Entrypoint, tt.wantEntrypoint) || !slices.Equal(got.Cmd, tt.wantCmd) {
				t.Errorf("entrypoint %q cmd %q, want %q %q", got.Entrypoint, got.Cmd, tt.wantEntrypoint, tt.wantCmd)
			}
			if got.User != tt.wantUser || got.WorkingDir != tt.wantWorkdir {
				t.Errorf("user %q workdir %q, want %q %q", got.User, got.WorkingDir, tt.wantUser, tt.wantWorkdir)
			}
			if got.StopSignal != "SIGQUIT" {
				t.Errorf("stop signal %q not inherited", got.StopSignal)
			}
		})
	}
	got := mergeImageConfig(&container.Config{Env: []string{"A=user", "B=2"}, Labels: map[string]string{"k": "user"}}, img)
	if want := []string{"PATH=/bin", "A=user", "B=2"}; !slices.Equal(got.Env, want) {
		t.Errorf("env %q, want %q", got.Env, want)
	}
	if got.Labels["k"] != "user" || got.Labels["only"] != "img" {
		t.Errorf("labels %v: user must win, image labels kept", got.Labels)
	}
}

func TestProcessEnv(t *testing.T) {
	tests := []struct {
		name string
		cfg  container.Config
		want []string
	}{
		{"default PATH added", container.Config{Hostname: "h", Env: []string{"A=1"}},
			[]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=h", "A=1"}},
		{"image PATH kept, TERM with tty", container.Config{Hostname: "h", Tty: true, Env: []string{"PATH=/x"}},
			[]string{"PATH=/x", "HOSTNAME=h", "TERM=xterm"}},
		{"user HOSTNAME wins", container.Config{Hostname: "h", Env: []string{"HOSTNAME=mine", "PATH=/x"}},
			[]string{"PATH=/x", "HOSTNAME=mine"}},
	}
	for _, tt := range tests {
		if got := processEnv(&tt.cfg, nil); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestParseSignal(t *testing.T) {
	tests := []struct {
		in      string
		want    syscall.Signal
		wantErr bool
	}{
		{"", syscall.SIGTERM, false}, {"SIGKILL", syscall.SIGKILL, false}, {"hup", syscall.SIGHUP, false},
		{"9", syscall.SIGKILL, false}, {"0", 0, true}, {"SIGNOPE", 0, true},
		// dockerd's table: real-time signals by name (systemd images
		// stop with SIGRTMIN+3), and any number as a stop signal.
		{"SIGRTMIN+3", 37, false}, {"rtmax", 64, false}, {"STKFLT", 16, false}, {"65", 65, false},
	}
	for _, tt := range tests {
		got, err := ParseSignal(tt.in, syscall.SIGTERM)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	// docker kill also wants a signal Linux has, in dockerd's words.
	for in, want := range map[string]string{
		"":           "",
		"SIGRTMIN+3": "",
		"64":         "",
		"65":         "The linux daemon does not support signal 65",
		"bogus":      "Invalid signal: bogus",
	} {
		_, err := ParseKillSignal(in)
		if got := fmt.Sprint(err); want == "" && err != nil || want != "" && got != want {
			t.Errorf("ParseKillSignal(%q) error = %v, want %q", in, err, want)
		}
	}
}

func TestStatusText(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) string { return now.Add(-d).Format(time.RFC3339Nano) }
	tests := []struct {
		state container.State
		want  string
	}{
		{container.State{Status: container.StateCreated}, "Created"},
		{container.State{Status: container.StateRunning, StartedAt: ago(5 * time.Second)}, "Up 5 seconds"},
		{container.State{Status: container.StateRunning, StartedAt: ago(90 * time.Second)}, "Up About a minute"},
		{container.State{Status: container.StateExited, ExitCode: 137, FinishedAt: ago(3 * time.Hour)}, "Exited (137) 3 hours ago"},
		{container.State{Status: container.StateDead, Dead: true, ExitCode: 137, FinishedAt: ago(3 * time.Hour)}, "Dead"},
	}
	for _, tt := range tests {
		if got := statusText(tt.state, now); got != tt.want {
			t.Errorf("statusText(%+v) = %q, want %q", tt.state, got, tt.want)
		}
	}
}

// listNet gives List the networks and ports of its containers.
type listNet struct {
	Network // only Settings is called
	ports   map[string]network.PortMap
	nets    map[string]map[string]*network.EndpointSettings
}

func (n listNet) Settings(id string, _ map[string]*network.EndpointSettings, _ network.PortSet) (network.PortMap, map[string]*network.EndpointSettings) {
	return n.ports[id], n.nets[id]
}

// TestListFilters: GET /containers/json's filters, limit and --all as
// dockerd applies them to the containers in its list, newest first.
func TestListFilters(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	m := &Manager{byID: map[string]*ctr{}}
	m.net = listNet{
		ports: map[string]network.PortMap{
			"bbbb02": {network.MustParsePort("80/tcp"): {{HostIP: netip.IPv4Unspecified(), HostPort: "8080"}}, network.MustParsePort("53/udp"): nil},
		},
		nets: map[string]map[string]*network.EndpointSettings{
			"bbbb02": {"appnet": {NetworkID: "f00dcafe"}},
			"aaaa01": {"bridge": {NetworkID: "b1d6e"}},
		},
	}
	add := func(id, name string, age time.Duration, state container.State, labels map[string]string, mounts ...Mount) {
		m.byID[id] = &ctr{m: m, rec: Record{ID: id, Name: name, Image: "busybox", ImageID: "sha256:feed" + id, Created: t0.Add(-age),
			Config: &container.Config{Labels: labels}, HostConfig: &container.HostConfig{}, State: state, Mounts: mounts}}
	}
	add("aaaa01", "old", 3*time.Hour, container.State{Status: container.StateExited, ExitCode: 3}, map[string]string{"tier": "front"},
		Mount{MountPoint: container.MountPoint{Type: "volume", Name: "data", Destination: "/data"}},
		Mount{MountPoint: container.MountPoint{Type: "bind", Source: "/srv", Destination: "/srv"}})
	add("bbbb02", "mid", 2*time.Hour, container.State{Status: container.StateRunning, Running: true}, nil)
	add("bbbb03", "new", time.Hour, container.State{Status: container.StateCreated}, nil)

	for _, tc := range []struct {
		opts ListOptions
		want string
	}{
		{ListOptions{}, "mid"},
		{ListOptions{All: true}, "new mid old"},
		{ListOptions{Limit: 1}, "new"}, // a limit lists stopped containers too
		{ListOptions{Limit: 2, Filters: map[string][]string{"status": {"exited", "created"}}}, "new old"},
		{ListOptions{Filters: map[string][]string{"exited": {"3"}}}, ""}, // not without --all
		{ListOptions{All: true, Filters: map[string][]string{"exited": {"3"}}}, "old"},
		{ListOptions{All: true, Filters: map[string][]string{"name": {"^/?mi"}}}, "mid"},
		{ListOptions{All: true, Filters: map[string][]string{"id": {"bbbb"}}}, "new mid"},
		{ListOptions{All: true, Filters: map[string][]string{"label": {"tier=front"}}}, "old"},
		{ListOptions{All: true, Filters: map[string][]string{"label": {"tier=back"}}}, ""},
		{ListOptions{All: true, Filters: map[string][]string{"ancestor": {"busybox"}}}, "new mid old"},
		{ListOptions{All: true, Filters: map[string][]string{"before": {"new"}}}, "mid old"},
		{ListOptions{All: true, Filters: map[string][]string{"before": {"bbbb02"}}}, "old"},
		{ListOptions{All: true, Filters: map[string][]string{"since": {"aaaa"}}}, "new mid"},
		{ListOptions{All: true, Filters: map[string][]string{"since": {"old"}, "before": {"/new"}}}, "mid"},
		{ListOptions{All: true, Filters: map[string][]string{"volume": {"data"}}}, "old"},
		{ListOptions{All: true, Filters: map[string][]string{"volume": {"/srv"}}}, "old"},
		{ListOptions{All: true, Filters: map[string][]string{"volume": {"/nope", "/data"}}}, "old"},
		{ListOptions{All: true, Filters: map[string][]string{"volume": {"dat"}}}, ""},
		{ListOptions{All: true, Filters: map[string][]string{"network": {"appnet"}}}, "mid"},
		{ListOptions{All: true, Filters: map[string][]string{"network": {"b1d"}}}, "old"},
		{ListOptions{All: true, Filters: map[string][]string{"network": {"app"}}}, ""},
		{ListOptions{All: true, Filters: map[string][]string{"publish": {"8080"}}}, "mid"},
		{ListOptions{All: true, Filters: map[string][]string{"publish": {"8000-9000/tcp"}}}, "mid"},
		{ListOptions{All: true, Filters: map[string][]string{"publish": {"8080/udp"}}}, ""},
		{ListOptions{All: true, Filters: map[string][]string{"publish": {"80"}}}, ""},
		{ListOptions{All: true, Filters: map[string][]string{"expose": {"53/udp"}}}, "mid"},
		{ListOptions{All: true, Filters: map[string][]string{"expose": {"80"}}}, "mid"},
		{ListOptions{All: true, Filters: map[string][]string{"is-task": {"true"}}}, ""},
		{ListOptions{All: true, Filters: map[string][]string{"is-task": {"0"}}}, "new mid old"},
		{ListOptions{All: true, Filters: map[string][]string{"isolation": {"default"}}}, "new mid old"},
	} {
		list, err := m.List(context.Background(), tc.opts)
		if err != nil {
			t.Errorf("List(%+v): %v", tc.opts, err)
			continue
		}
		var names []string
		for _, s := range list {
			names = append(names, strings.TrimPrefix(s.Names[0], "/"))
		}
		if got := strings.Join(names, " "); got != tc.want {
			t.Errorf("List(%+v) = %q, want %q", tc.opts, got, tc.want)
		}
	}

	for _, tc := range []struct {
		filters map[string][]string
		wantErr string
	}{
		{map[string][]string{"colour": {"x"}}, "invalid filter 'colour'"},
		{map[string][]string{"status": {"sleeping"}}, "invalid filter 'status=sleeping'"},
		{map[string][]string{"exited": {"x"}}, `invalid filter 'exited=x': strconv.Atoi: parsing "x": invalid syntax`},
		{map[string][]string{"is-task": {"maybe"}}, "invalid filter 'is-task=[maybe]'"},
		{map[string][]string{"publish": {"80:80"}}, "filter for 'publish' should not contain ':': 80:80"},
		{map[string][]string{"expose": {"90-80"}}, "error while looking up for expose 90-80: invalid port range: 90-80"},
		{map[string][]string{"before": {"nosuch"}}, "no such container nosuch"},
		{map[string][]string{"since": {"bbbb"}}, "no such container bbbb"}, // two containers' prefix
	} {
		_, err := m.List(context.Background(), ListOptions{All: true, Filters: tc.filters})
		if err == nil || err.Error() != tc.wantErr {
			t.Errorf("List with filters %v: error %v, want %q", tc.filters, err, tc.wantErr)
		}
	}
}

// TestListNewestFirst: containers list newest first by their creation
// time to the nanosecond, as dockerd lists them, also when they were
// created within one second (whose summaries' Created are equal).
func TestListNewestFirst(t *testing.T) {
	second := time.Unix(1_700_000_000, 0)
	m := &Manager{byID: map[string]*ctr{}}
	for _, c := range []struct {
		id, name string
		created  time.Time
	}{
		// IDs in creation order, the order a tie broken by ID gives.
		{"aaaa", "first", second.Add(100 * time.Millisecond)},
		{"bbbb", "second", second.Add(600 * time.Millisecond)},
		{"cccc", "third", second.Add(900 * time.Millisecond)},
		{"dddd", "next-second", second.Add(1500 * time.Millisecond)},
	} {
		m.byID[c.id] = &ctr{m: m, rec: Record{ID: c.id, Name: c.name, Created: c.created,
			Config: &container.Config{}, HostConfig: &container.HostConfig{},
			State: container.State{Status: container.StateExited}}}
	}
	list, err := m.List(context.Background(), ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list {
		names = append(names, s.Names[0])
	}
	if got, want := strings.Join(names, " "), "/next-second /third /second /first"; got != want {
		t.Errorf("listed %s, want %s", got, want)
	}
}

// TestParseSecurityOpt: --security-opt as dockerd reads it, its
// refusals in its words.
func TestParseSecurityOpt(t *testing.T) {
	for _, tc := range []struct {
		opts    []string
		want    bool
		wantErr string
	}{
		{nil, false, ""},
		{[]string{"no-new-privileges"}, true, ""},
		{[]string{"no-new-privileges=true", "no-new-privileges:false"}, false, ""},
		{[]string{"label=disable", "label:type:x", "disable", "apparmor=unconfined", "seccomp={}", "no-new-privileges=1"}, true, ""},
		{[]string{"bogus"}, false, `invalid --security-opt 1: "bogus"`},
		{[]string{"bogus=1"}, false, `invalid --security-opt 2: "bogus=1"`},
		{[]string{"no-new-privileges:maybe"}, false, `invalid --security-opt 2: "no-new-privileges:maybe"`},
	} {
		got, err := parseSecurityOpt(tc.opts)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("%q: error %v, want %q", tc.opts, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.opts, got, err, tc.want)
		}
	}
}

// TestRefuseSharedNamespaces: the host's or another container's PID, IPC
// or UTS namespace is refused; a VM's own modes are not.
func TestRefuseSharedNamespaces(t *testing.T) {
	for _, tc := range []struct {
		hc      container.HostConfig
		wantErr string
	}{
		{container.HostConfig{}, ""},
		{container.HostConfig{IpcMode: "private"}, ""},
		{container.HostConfig{IpcMode: "shareable"}, ""},
		{container.HostConfig{IpcMode: "none"}, ""},
		{container.HostConfig{PidMode: "host"}, "husk does not support --pid host: every container is a VM with its own kernel"},
		{container.HostConfig{PidMode: "container:app"}, "husk does not support --pid container:<name>: every container is a VM with its own kernel"},
		{container.HostConfig{IpcMode: "host"}, "husk does not support --ipc host: every container is a VM with its own kernel"},
		{container.HostConfig{IpcMode: "container:app"}, "husk does not support --ipc container:<name>: every container is a VM with its own kernel"},
		{container.HostConfig{UTSMode: "host"}, "husk does not support --uts host: every container is a VM with its own kernel"},
		{container.HostConfig{IpcMode: "bogus"}, "invalid IPC mode: bogus"},
		{container.HostConfig{PidMode: "bogus"}, "invalid PID mode: bogus"},
		{container.HostConfig{UTSMode: "bogus"}, "invalid UTS mode: bogus"},
		{container.HostConfig{Isolation: "default"}, ""},
		{container.HostConfig{Isolation: "process"}, "invalid isolation (process): linux only supports 'default'"},
		{container.HostConfig{Isolation: "hyperv"}, "invalid isolation (hyperv): linux only supports 'default'"},
	} {
		err := refuseSharedNamespaces(&tc.hc)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.hc, err)
			}
			continue
		}
		if !errdefs.IsInvalidArgument(err) || err.Error() != tc.wantErr {
			t.Errorf("%+v: %v, want %q", tc.hc, err, tc.wantErr)
		}
	}
}

func TestPSCommand(t *testing.T) {
	for _, tc := range []struct {
		path string
		args []string
		want string
	}{
		{"sleep", nil, "sleep"},
		{"sh", []string{"-c", `echo "a b"`}, `sh -c 'echo "a b"'`},
		{"/entry", []string{"x", "y z", ""}, "/entry x 'y z' "},
	} {
		if got := psCommand(tc.path, tc.args); got != tc.want {
			t.Errorf("psCommand(%q, %q) = %q, want %q", tc.path, tc.args, got, tc.want)
		}
	}
}

// refImages resolves references from a map; Layers is not used here.
type refImages struct {
	Images
	ids map[string]string
}

func (r refImages) Resolve(ctx context.Context, ref string) (Image, error) {
	if id, ok := r.ids[ref]; ok {
		return Image{ID: id}, nil
	}
	return Image{}, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
}

// TestListImageColumn: docker ps shows the reference a container was
// created from while it still names the container's image, and the
// image's ID once it is gone or names another, as dockerd does.
func TestListImageColumn(t *testing.T) {
	m := &Manager{byID: map[string]*ctr{}}
	m.images = refImages{ids: map[string]string{"web:1": "sha256:aaa", "web:2": "sha256:new"}}
	for i, c := range []struct{ name, ref, id string }{
		{"same", "web:1", "sha256:aaa"},
		{"retagged", "web:2", "sha256:old"},
		{"untagged", "gone:1", "sha256:ccc"},
		{"by-id", "sha256:ddd", "sha256:ddd"},
	} {
		m.byID[c.name] = &ctr{m: m, rec: Record{ID: c.name, Name: c.name, Image: c.ref, ImageID: c.id,
			Created: time.Unix(int64(1000-i), 0), Config: &container.Config{}, HostConfig: &container.HostConfig{},
			State: container.State{Status: container.StateExited}}}
	}
	list, err := m.List(context.Background(), ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range list {
		got = append(got, s.Names[0]+"="+s.Image)
	}
	if want := "/same=web:1 /retagged=sha256:old /untagged=sha256:ccc /by-id=sha256:ddd"; strings.Join(got, " ") != want {
		t.Errorf("images %s, want %s", strings.Join(got, " "), want)
	}
}
