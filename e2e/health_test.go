package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/e2e/testimages"
)

// health is State.Health as inspect shows it.
type health struct {
	Status        string
	FailingStreak int
	Log           []struct {
		Start, End time.Time
		ExitCode   int
		Output     string
	}
}

// healthOf inspects a container's State.Health; nil when it has none.
func healthOf(t *testing.T, name string) *health {
	t.Helper()
	out := mustDocker(t, "inspect", "-f", "{{json .State.Health}}", name)
	var h *health
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("State.Health of %s: %v (%q)", name, err, out)
	}
	return h
}

// awaitHealth waits until the container's health satisfies ok and returns
// it.
func awaitHealth(t *testing.T, name, what string, ok func(*health) bool) *health {
	t.Helper()
	var h *health
	eventually(t, name+" "+what, func() string {
		h = healthOf(t, name)
		if h != nil && ok(h) {
			return ""
		}
		b, _ := json.Marshal(h)
		return string(b)
	})
	return h
}

func psNames(t *testing.T, filter string) []string {
	t.Helper()
	out := mustDocker(t, "ps", "--filter", filter, "--filter", "name="+namePrefix(t), "--format", "{{.Names}}")
	names := strings.Fields(out)
	slices.Sort(names)
	return names
}

// TestHealthcheck runs probes from an image's HEALTHCHECK and from the
// --health-* flags; every expectation was checked against dockerd 20.10.
func TestHealthcheck(t *testing.T) {
	s := requireSuite(t)
	base := pulled(t, testimages.Busybox)
	img := strings.ToLower(namePrefix(t)) + ":latest"
	dir := writeContext(t, map[string]string{"Dockerfile": "FROM " + base + "\nHEALTHCHECK --interval=1s --timeout=30s CMD [\"cat\", \"/etc/hostname\"]\n"})
	if r := dockerBuild(t, dir, "-q", "-t", img); r.Code != 0 {
		t.Fatalf("build: %+v", r)
	}
	t.Cleanup(func() { docker(t, "rmi", "-f", img) })
	if got := mustDocker(t, "image", "inspect", "-f", "{{json .Config.Healthcheck}}", img); got != `{"Test":["CMD","cat","/etc/hostname"],"Interval":1000000000,"Timeout":30000000000}`+"\n" {
		t.Errorf("image healthcheck = %s", got)
	}

	// Refused at create, in dockerd's words (the CLI checks some itself).
	for _, tt := range []struct{ flag, msg string }{
		{"--health-interval=100us", "docker: Error response from daemon: Interval in Healthcheck cannot be less than 1ms"},
		{"--health-timeout=100us", "docker: Error response from daemon: Timeout in Healthcheck cannot be less than 1ms"},
		{"--health-start-period=100us", "docker: Error response from daemon: StartPeriod in Healthcheck cannot be less than 1ms"},
	} {
		want := result{Code: 125, Stderr: tt.msg + "\n\nRun 'docker run --help' for more information\n"}
		if r := docker(t, "run", "--rm", tt.flag, "--health-cmd", "true", base, "true"); r != want {
			t.Errorf("run %s = %+v, want %+v", tt.flag, r, want)
		}
	}

	since := eventsNow()
	fromImage := containerName(t, "-image")
	failing := containerName(t, "-failing")
	slow := containerName(t, "-slow")
	starting := containerName(t, "-starting")
	none := containerName(t, "-none")
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", fromImage, "--restart", "always", img, "sleep", "1000"))
	mustDocker(t, "run", "-d", "--name", failing, "--health-cmd", "echo bad; exit 1", "--health-interval", "1s", "--health-retries", "2", base, "sleep", "1000")
	mustDocker(t, "run", "-d", "--name", slow, "--health-cmd", "echo start; sleep 30", "--health-timeout", "1s", "--health-interval", "1s", "--health-retries", "1", base, "sleep", "1000")
	mustDocker(t, "run", "-d", "--name", starting, "--health-cmd", "exit 1", "--health-interval", "1s", "--health-retries", "1", "--health-start-period", "1h", base, "sleep", "1000")
	mustDocker(t, "run", "-d", "--name", none, "--no-healthcheck", img, "sleep", "1000")

	// A CMD probe runs as an exec: the container's own hostname file.
	h := awaitHealth(t, fromImage, "healthy", func(h *health) bool { return h.Status == "healthy" })
	if last := h.Log[len(h.Log)-1]; h.FailingStreak != 0 || last.ExitCode != 0 || last.Output != id[:12]+"\n" || last.End.Before(last.Start) {
		t.Errorf("healthy container's health = %+v", h)
	}
	// A failing CMD-SHELL probe: unhealthy after Retries failures, with
	// its output; the log keeps the last five results.
	h = awaitHealth(t, failing, "unhealthy with a full log", func(h *health) bool { return h.Status == "unhealthy" && len(h.Log) == 5 })
	if h.FailingStreak < 5 || h.Log[4].ExitCode != 1 || h.Log[4].Output != "bad\n" {
		t.Errorf("failing container's health = %+v", h)
	}
	// A probe past its timeout is killed and counted as a failure.
	h = awaitHealth(t, slow, "unhealthy", func(h *health) bool { return h.Status == "unhealthy" })
	if l := h.Log[0]; l.ExitCode != -1 || l.Output != "Health check exceeded timeout (1s)" || h.FailingStreak < 1 {
		t.Errorf("timed-out container's health = %+v", h)
	}
	// Within the start period failures do not count.
	h = awaitHealth(t, starting, "two results", func(h *health) bool { return len(h.Log) >= 2 })
	if h.Status != "starting" || h.FailingStreak != 0 || h.Log[1].ExitCode != 1 {
		t.Errorf("starting container's health = %+v", h)
	}
	// --no-healthcheck: no health at all, though the config says NONE.
	if h := healthOf(t, none); h != nil {
		t.Errorf("--no-healthcheck container's health = %+v", h)
	}
	if got := mustDocker(t, "inspect", "-f", "{{json .Config.Healthcheck}}", none); got != `{"Test":["NONE"],"Interval":1000000000,"Timeout":30000000000}`+"\n" {
		t.Errorf("--no-healthcheck config = %s", got)
	}

	// ps: the health in STATUS, and the health filter.
	out := mustDocker(t, "ps", "--filter", "name="+namePrefix(t), "--format", "{{.Names}}|{{.Status}}")
	for name, suffix := range map[string]string{fromImage: " (healthy)", failing: " (unhealthy)", slow: " (unhealthy)", starting: " (health: starting)", none: ""} {
		found := false
		for _, l := range strings.Split(out, "\n") {
			if n, status, ok := strings.Cut(l, "|"); ok && n == name {
				found = true
				if !strings.HasPrefix(status, "Up ") || !strings.HasSuffix(status, suffix) || suffix == "" && strings.Contains(status, "(") {
					t.Errorf("ps status of %s = %q, want Up ...%s", name, status, suffix)
				}
			}
		}
		if !found {
			t.Errorf("ps lists no %s: %q", name, out)
		}
	}
	for filter, want := range map[string][]string{
		"health=healthy":   {fromImage},
		"health=unhealthy": {failing, slow},
		"health=starting":  {starting},
		"health=none":      {none},
	} {
		if got := psNames(t, filter); !slices.Equal(got, want) {
			t.Errorf("ps --filter %s = %q, want %q", filter, got, want)
		}
	}
	if r := docker(t, "ps", "--filter", "health=bogus"); r != (result{Code: 1, Stderr: "Error response from daemon: Unrecognised filter value for health: bogus\n"}) {
		t.Errorf("ps --filter health=bogus = %+v", r)
	}

	// Events: each probe is an exec; a change of status is published.
	evs := pastEvents(t, since, "container="+fromImage)
	for _, want := range []string{
		"container exec_create: cat /etc/hostname " + fromImage + " exitCode= signal=",
		"container exec_start: cat /etc/hostname " + fromImage + " exitCode= signal=",
		"container exec_die " + fromImage + " exitCode=0 signal=",
		"container health_status: healthy " + fromImage + " exitCode= signal=",
	} {
		if !slices.Contains(evs, want) {
			t.Errorf("no event %q among %q", want, evs)
		}
	}
	healthEvents := func(since string) []string {
		var out []string
		for _, e := range pastEvents(t, since, "event=health_status") {
			if strings.Contains(e, namePrefix(t)) {
				out = append(out, e)
			}
		}
		slices.Sort(out)
		return out
	}
	wantEvents := []string{
		"container health_status: healthy " + fromImage + " exitCode= signal=",
		"container health_status: unhealthy " + failing + " exitCode= signal=",
		"container health_status: unhealthy " + slow + " exitCode= signal=",
	}
	if got := healthEvents(since); !slices.Equal(got, wantEvents) {
		t.Errorf("health_status events = %q, want %q", got, wantEvents)
	}
	for _, n := range []string{failing, slow, starting, none} {
		mustDocker(t, "rm", "-f", n)
	}

	// Pause stops the probes, and a container whose probes stopped is
	// unhealthy; unpause resumes them.
	mustDocker(t, "pause", fromImage)
	if h := healthOf(t, fromImage); h.Status != "unhealthy" || len(h.Log) == 0 {
		t.Errorf("paused container's health = %+v", h)
	}
	mustDocker(t, "unpause", fromImage)
	awaitHealth(t, fromImage, "healthy after unpause", func(h *health) bool { return h.Status == "healthy" })

	// Stopped: unhealthy, the log kept; started again: healthy again.
	mustDocker(t, "stop", "-t", "1", fromImage)
	h = healthOf(t, fromImage)
	if h.Status != "unhealthy" || len(h.Log) == 0 {
		t.Errorf("stopped container's health = %+v", h)
	}
	stoppedLog := h.Log[len(h.Log)-1].Start
	restarted := fmt.Sprint(time.Now().Unix())
	mustDocker(t, "start", fromImage)
	awaitHealth(t, fromImage, "healthy after start", func(h *health) bool {
		return h.Status == "healthy" && h.Log[len(h.Log)-1].Start.After(stoppedLog)
	})
	eventually(t, "a new health_status event", func() string {
		if evs := pastEvents(t, restarted, "container="+fromImage, "event=health_status"); len(evs) == 0 {
			return "none yet"
		}
		return ""
	})

	// Probes resume after a daemon restart (the restart policy starts the
	// container again) and, on huskd, after a crash the VM survives.
	restartDaemon(t)
	before := time.Now()
	awaitHealth(t, fromImage, "probed after the daemon restart", func(h *health) bool {
		return h.Status == "healthy" && h.Log[len(h.Log)-1].Start.After(before)
	})
	if s.Kind == "huskd" {
		crashDaemon(t)
		before := time.Now()
		awaitHealth(t, fromImage, "probed after the daemon crash", func(h *health) bool {
			return h.Status == "healthy" && h.Log[len(h.Log)-1].Start.After(before)
		})
	}
	mustDocker(t, "rm", "-f", fromImage)
}
