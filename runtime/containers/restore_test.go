package containers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/moby/api/types/container"
)

// TestLostState: a container whose VM is gone after a daemon restart is
// lost (255), unless a checkpoint was stopping it when the daemon died.
func TestLostState(t *testing.T) {
	cases := []struct {
		name      string
		note      bool
		wantCode  int
		wantError bool
	}{
		{"VM gone", false, 255, true},
		{"stopped by its checkpoint", true, checkpointExitCode, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.note {
				if err := os.WriteFile(filepath.Join(dir, checkpointExitFile), []byte("cp\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			st := lostState(dir, "2026-11-22T10:00:00Z")
			if st.Status != container.StateExited || st.ExitCode != c.wantCode || (st.Error != "") != c.wantError {
				t.Errorf("state %+v, want exited %d with an error: %v", st, c.wantCode, c.wantError)
			}
			if st.StartedAt != "2026-11-22T10:00:00Z" || st.FinishedAt == "" {
				t.Errorf("times %q %q, want StartedAt kept and FinishedAt set", st.StartedAt, st.FinishedAt)
			}
		})
	}
}
