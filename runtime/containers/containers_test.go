package containers

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/moby/api/types/container"
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
		{"9", syscall.SIGKILL, false}, {"0", 0, true}, {"SIGNOPE", 0, true}, {"65", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSignal(tt.in, syscall.SIGTERM)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
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

func TestFilters(t *testing.T) {
	rec := Record{ID: "abcdef0123", Name: "web-1", Image: "busybox", ImageID: "sha256:feed",
		Config: &container.Config{Labels: map[string]string{"tier": "front"}},
		State:  container.State{Status: container.StateExited, ExitCode: 3}}
	tests := []struct {
		filters map[string][]string
		want    bool
	}{
		{map[string][]string{"name": {"^web-1$"}}, true},
		{map[string][]string{"name": {"^/web-1$"}}, true},
		{map[string][]string{"name": {"^web$"}}, false},
		{map[string][]string{"id": {"abcd"}}, true},
		{map[string][]string{"status": {"exited"}, "exited": {"3"}}, true},
		{map[string][]string{"exited": {"0"}}, false},
		{map[string][]string{"label": {"tier=front"}}, true},
		{map[string][]string{"label": {"tier=back"}}, false},
		{map[string][]string{"ancestor": {"busybox"}}, true},
	}
	for _, tt := range tests {
		f, err := newFilter(tt.filters)
		if err != nil {
			t.Fatalf("newFilter(%v): %v", tt.filters, err)
		}
		if got := f.match(rec); got != tt.want {
			t.Errorf("filters %v match = %v, want %v", tt.filters, got, tt.want)
		}
	}
	for _, bad := range []map[string][]string{{"colour": {"x"}}, {"status": {"sleeping"}}, {"exited": {"x"}}} {
		if _, err := newFilter(bad); err == nil {
			t.Errorf("newFilter(%v) accepted", bad)
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
