package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGuestConsolesQuotesEachNamedLog: a failure's output carries the end
// of every guest console huskd's error names, once each, and says so
// when one cannot be read.
func TestGuestConsolesQuotesEachNamedLog(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a", "console.log")
	if err := os.MkdirAll(filepath.Dir(a), 0o755); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range 39 {
		lines = append(lines, fmt.Sprintf("[%d] boot", i))
	}
	lines = append(lines, "..MP-BIOS bug: 8254 timer not connected to IO-APIC")
	if err := os.WriteFile(a, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "gone", "console.log")
	stderr := "docker: Error response from daemon: boot 6d74eccc07dc: guest agent not ready: context deadline exceeded (console log: " + a + ").\n" +
		`time="x" level=error msg="Error waiting for container: boot 6d74eccc07dc: guest agent not ready (console log: ` + a + `)"` + "\n" +
		"another: (console log: " + missing + ")\n"

	got := guestConsoles(stderr)
	if n := strings.Count(got, "last lines of guest console "+a); n != 1 {
		t.Errorf("console %s quoted %d times, want once:\n%s", a, n, got)
	}
	if !strings.Contains(got, "MP-BIOS bug") || !strings.Contains(got, "[10] boot") || strings.Contains(got, "[9] boot") {
		t.Errorf("want the log's last 30 lines only, got:\n%s", got)
	}
	if !strings.Contains(got, "cannot read "+missing) {
		t.Errorf("an unreadable log is not reported:\n%s", got)
	}
	if got := guestConsoles("Error response from daemon: No such container: x"); got != "" {
		t.Errorf("text naming no console gave %q, want nothing", got)
	}
}
