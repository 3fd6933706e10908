package e2e

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/e2e/testimages"
)

// statsLine is `docker stats --no-stream`'s row in the format the test
// asks for: name, CPU %, memory usage / limit, memory %, block I/O, PIDs.
var statsLine = regexp.MustCompile(`^(\S+) (\d+\.\d\d)% (\S+ / \S+) (\d+\.\d\d)% (\S+ / \S+) (\d+)$`)

func TestStats(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	busy := containerName(t, "-busy")
	idle := containerName(t, "-idle")
	stopped := containerName(t, "-stopped")
	mustDocker(t, "run", "-d", "--name", busy, img, "sh", "-c", "while :; do :; done")
	mustDocker(t, "run", "-d", "--name", idle, img, "sleep", "1000")
	mustDocker(t, "create", "--name", stopped, img, "true")

	// The CLI computes CPU % from two samples (precpu_stats, cpu_stats):
	// a busy loop shows, and one task each.
	out := mustDocker(t, "stats", "--no-stream", "--format",
		"{{.Name}} {{.CPUPerc}} {{.MemUsage}} {{.MemPerc}} {{.BlockIO}} {{.PIDs}}", busy, idle)
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := statsLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("stats row %q does not match %s", line, statsLine)
		}
		rows[m[1]] = m
	}
	if m := rows[busy]; m == nil || mustFloat(t, m[2]) < 1 || m[6] != "1" {
		t.Errorf("busy container's row: %q", m)
	}
	if m := rows[idle]; m == nil || m[6] != "1" || strings.HasPrefix(m[3], "0B /") {
		t.Errorf("idle container's row: %q", m)
	}

	// The API: stream=false gives a sample with its predecessor's CPU
	// counters; a stopped container an empty sample that names it.
	var st container.StatsResponse
	apiJSON(t, http.MethodGet, "/containers/"+idle+"/stats?stream=false", "", http.StatusOK, &st)
	if st.Name != "/"+idle || st.CPUStats.OnlineCPUs < 1 || st.CPUStats.SystemUsage <= st.PreCPUStats.SystemUsage ||
		st.PreCPUStats.SystemUsage == 0 || st.MemoryStats.Usage == 0 || st.MemoryStats.Limit < st.MemoryStats.Usage ||
		st.PidsStats.Current != 1 || st.Read.Before(st.PreRead) {
		t.Errorf("stats of a running container: %+v", st)
	}
	st = container.StatsResponse{}
	apiJSON(t, http.MethodGet, "/containers/"+stopped+"/stats?stream=false", "", http.StatusOK, &st)
	if st.Name != "/"+stopped || st.ID == "" || !st.Read.IsZero() || st.CPUStats.SystemUsage != 0 {
		t.Errorf("stats of a stopped container: %+v", st)
	}
	if r := api(t, http.MethodGet, "/containers/no-such-container/stats?stream=false", ""); r.Status != http.StatusNotFound ||
		r.Body != `{"message":"No such container: no-such-container"}`+"\n" {
		t.Errorf("stats of a missing container: %+v", r)
	}
	mustDocker(t, "rm", "-f", busy, idle, stopped)
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
