package containers

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
)

func TestApplyProbeResult(t *testing.T) {
	started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration, code int) *container.HealthcheckResult {
		return &container.HealthcheckResult{Start: started.Add(d), End: started.Add(d), ExitCode: code}
	}
	tests := []struct {
		name       string
		hc         container.HealthConfig
		codes      []int
		period     time.Duration // between results
		wantStatus container.HealthStatus
		wantStreak int
		wantLog    int
	}{
		{"one success", container.HealthConfig{}, []int{0}, time.Second, container.Healthy, 0, 1},
		{"default retries", container.HealthConfig{}, []int{1, 1}, time.Second, container.Starting, 2, 2},
		{"three failures", container.HealthConfig{}, []int{1, 1, 1}, time.Second, container.Unhealthy, 3, 3},
		{"any non-zero fails", container.HealthConfig{Retries: 1}, []int{2}, time.Second, container.Unhealthy, 1, 1},
		{"timeout fails", container.HealthConfig{Retries: 1}, []int{-1}, time.Second, container.Unhealthy, 1, 1},
		{"success resets", container.HealthConfig{Retries: 2}, []int{1, 0, 1}, time.Second, container.Healthy, 1, 3},
		{"recovers", container.HealthConfig{Retries: 1}, []int{1, 0}, time.Second, container.Healthy, 0, 2},
		{"log keeps five", container.HealthConfig{}, []int{0, 0, 0, 0, 0, 0, 0}, time.Second, container.Healthy, 0, 5},
		{"start period forgives", container.HealthConfig{Retries: 1, StartPeriod: time.Minute}, []int{1, 1, 1}, time.Second, container.Starting, 0, 3},
		{"start period ends", container.HealthConfig{Retries: 1, StartPeriod: 2 * time.Second}, []int{1, 1, 1}, time.Second, container.Unhealthy, 2, 3},
		// Once healthy, the start period no longer shields failures.
		{"start period after success", container.HealthConfig{Retries: 1, StartPeriod: time.Minute}, []int{0, 1}, time.Second, container.Unhealthy, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := container.Health{Status: container.Starting}
			var last *container.HealthcheckResult
			for i, code := range tt.codes {
				last = at(time.Duration(i+1)*tt.period, code)
				h, _ = applyProbeResult(h, tt.hc, started, last)
			}
			if h.Status != tt.wantStatus || h.FailingStreak != tt.wantStreak || len(h.Log) != tt.wantLog {
				t.Errorf("status %s streak %d log %d, want %s %d %d", h.Status, h.FailingStreak, len(h.Log), tt.wantStatus, tt.wantStreak, tt.wantLog)
			}
			if h.Log[len(h.Log)-1] != last {
				t.Errorf("the last result is not the newest log entry")
			}
		})
	}
}

func TestApplyProbeResultReportsChanges(t *testing.T) {
	started := time.Now()
	h := container.Health{Status: container.Starting}
	var changes []bool
	for _, code := range []int{0, 0, 1, 0} {
		var changed bool
		h, changed = applyProbeResult(h, container.HealthConfig{Retries: 1}, started, &container.HealthcheckResult{Start: started, ExitCode: code})
		changes = append(changes, changed)
	}
	if want := []bool{true, false, true, true}; !reflect.DeepEqual(changes, want) {
		t.Errorf("changes = %v, want %v", changes, want)
	}
}

func TestApplyProbeResultLeavesOldLog(t *testing.T) {
	old := container.Health{Status: container.Healthy, Log: make([]*container.HealthcheckResult, 2, 8)}
	before := old.Log[:cap(old.Log)][2]
	_, _ = applyProbeResult(old, container.HealthConfig{}, time.Now(), &container.HealthcheckResult{})
	if old.Log[:cap(old.Log)][2] != before {
		t.Error("applyProbeResult wrote into the previous log's array, which inspect may be reading")
	}
}

func TestLimitedBuffer(t *testing.T) {
	var b limitedBuffer
	fmt.Fprint(&b, strings.Repeat("a", 4000))
	n, err := b.Write([]byte(strings.Repeat("b", 1000)))
	if n != 1000 || err != nil {
		t.Fatalf("Write = %d, %v; want the whole write taken", n, err)
	}
	got := b.String()
	if len(got) != maxProbeOutput+3 || !strings.HasSuffix(got, strings.Repeat("b", 96)+"...") {
		t.Errorf("output of %d bytes ending %q; want %d bytes ending in 96 b's and ...", len(got), got[len(got)-10:], maxProbeOutput+3)
	}
	var short limitedBuffer
	fmt.Fprint(&short, "ok\n")
	if short.String() != "ok\n" {
		t.Errorf("short output = %q", short.String())
	}
}

func TestProbeCommand(t *testing.T) {
	tests := []struct {
		cfg  container.Config
		want []string
	}{
		{container.Config{Healthcheck: &container.HealthConfig{Test: []string{"CMD", "cat", "/x"}}}, []string{"cat", "/x"}},
		{container.Config{Healthcheck: &container.HealthConfig{Test: []string{"CMD-SHELL", "exit 1"}}}, []string{"/bin/sh", "-c", "exit 1"}},
		{container.Config{Shell: []string{"/bin/bash", "-ec"}, Healthcheck: &container.HealthConfig{Test: []string{"CMD-SHELL", "true"}}}, []string{"/bin/bash", "-ec", "true"}},
		{container.Config{Healthcheck: &container.HealthConfig{Test: []string{"NONE"}}}, nil},
		{container.Config{Healthcheck: &container.HealthConfig{Test: []string{"BOGUS", "x"}}}, nil},
		{container.Config{Healthcheck: &container.HealthConfig{}}, nil},
		{container.Config{}, nil},
	}
	for i, tt := range tests {
		if got := probeCommand(&tt.cfg); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%d: probeCommand = %q, want %q", i, got, tt.want)
		}
	}
}

func TestValidateHealthcheck(t *testing.T) {
	tests := []struct {
		hc   *container.HealthConfig
		want string
	}{
		{nil, ""},
		{&container.HealthConfig{Interval: time.Millisecond, Timeout: time.Second, Retries: 3}, ""},
		{&container.HealthConfig{Interval: 100 * time.Microsecond}, "Interval in Healthcheck cannot be less than 1ms"},
		{&container.HealthConfig{Timeout: time.Microsecond}, "Timeout in Healthcheck cannot be less than 1ms"},
		{&container.HealthConfig{StartPeriod: time.Microsecond}, "StartPeriod in Healthcheck cannot be less than 1ms"},
		{&container.HealthConfig{StartInterval: time.Microsecond}, "StartInterval in Healthcheck cannot be less than 1ms"},
		{&container.HealthConfig{Retries: -1}, "Retries in Healthcheck cannot be negative"},
	}
	for i, tt := range tests {
		err := validateHealthcheck(tt.hc)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%d: unexpected error %v", i, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want || !errdefs.IsInvalidArgument(err)):
			t.Errorf("%d: error %v, want invalid argument %q", i, err, tt.want)
		}
	}
}

func TestMergeHealthcheck(t *testing.T) {
	img := &container.HealthConfig{Test: []string{"CMD", "true"}, Interval: time.Second, Timeout: 2 * time.Second, Retries: 4}
	// --health-interval alone keeps the image's test; --no-healthcheck
	// keeps its timings (dockerd shows both in inspect).
	got := mergeHealthcheck(&container.HealthConfig{Interval: 5 * time.Second}, img)
	want := &container.HealthConfig{Test: []string{"CMD", "true"}, Interval: 5 * time.Second, Timeout: 2 * time.Second, Retries: 4}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merge = %+v, want %+v", got, want)
	}
	got = mergeHealthcheck(&container.HealthConfig{Test: []string{"NONE"}}, img)
	want = &container.HealthConfig{Test: []string{"NONE"}, Interval: time.Second, Timeout: 2 * time.Second, Retries: 4}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merge NONE = %+v, want %+v", got, want)
	}
	if got := mergeHealthcheck(nil, img); !reflect.DeepEqual(got, img) || got == img {
		t.Errorf("merge of no user config = %+v, want a copy of the image's", got)
	}
	user := &container.HealthConfig{Test: []string{"CMD-SHELL", "x"}}
	if got := mergeHealthcheck(user, nil); got != user {
		t.Errorf("merge without an image check changed the user's")
	}
}

func TestHealthInPs(t *testing.T) {
	now := time.Now()
	running := container.State{Status: container.StateRunning, Running: true, StartedAt: now.Add(-3 * time.Second).Format(time.RFC3339Nano)}
	tests := []struct {
		health     *container.Health
		status     string
		filterWith string
	}{
		{nil, "Up 3 seconds", "none"},
		{&container.Health{Status: container.Starting}, "Up 3 seconds (health: starting)", "starting"},
		{&container.Health{Status: container.Healthy}, "Up 3 seconds (healthy)", "healthy"},
		{&container.Health{Status: container.Unhealthy}, "Up 3 seconds (unhealthy)", "unhealthy"},
	}
	for _, tt := range tests {
		s := running
		s.Health = tt.health
		if got := statusText(s, now); got != tt.status {
			t.Errorf("statusText = %q, want %q", got, tt.status)
		}
		f, err := newFilter(map[string][]string{"health": {tt.filterWith}})
		if err != nil {
			t.Fatal(err)
		}
		if !f.match(Record{State: s, Config: &container.Config{}}, container.Summary{}) {
			t.Errorf("health=%s does not match a container whose health is %v", tt.filterWith, tt.health)
		}
		other, _ := newFilter(map[string][]string{"health": {"healthy"}})
		if tt.filterWith != "healthy" && other.match(Record{State: s, Config: &container.Config{}}, container.Summary{}) {
			t.Errorf("health=healthy matches a container whose health is %v", tt.health)
		}
	}
	if _, err := newFilter(map[string][]string{"health": {"bogus"}}); err == nil || err.Error() != "Unrecognised filter value for health: bogus" || !errdefs.IsInvalidArgument(err) {
		t.Errorf("health=bogus: %v", err)
	}
}
