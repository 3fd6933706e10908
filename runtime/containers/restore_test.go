package containers

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

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

// TestUnfinishedRemoval: a container the previous daemon died removing is
// dead after a restart, as dockerd marks it: its exit is the removal's
// SIGKILL when it was running, it cannot be started, and docker rm
// removes it. A removal meanwhile is refused as dockerd refuses it.
func TestUnfinishedRemoval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		state    container.State
		wantCode int
	}{
		{"running", container.State{Status: container.StateRunning, Running: true, StartedAt: "2026-11-22T10:00:00Z"}, sigkillExitCode},
		{"exited", container.State{Status: container.StateExited, ExitCode: 3, StartedAt: "2026-11-22T10:00:00Z",
			FinishedAt: "2026-11-22T10:01:00Z"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{byID: map[string]*ctr{}, byName: map[string]*ctr{}, log: slog.New(slog.DiscardHandler)}
			dir := t.TempDir()
			id := strings.Repeat("ab", 32)
			c, err := m.newCtr(dir, Record{ID: id, Name: "victim", Config: &container.Config{},
				HostConfig: &container.HostConfig{}, State: tc.state, RemovalInProgress: true})
			if err != nil {
				t.Fatal(err)
			}
			m.byID[id], m.byName["victim"] = c, c

			err = m.remove(context.Background(), c, "victim", RemoveOptions{Force: true})
			if !errdefs.IsConflict(err) || err.Error() != "removal of container victim is already in progress" {
				t.Fatalf("a removal during another: %v, want a conflict naming victim", err)
			}

			m.Restore(context.Background())
			b, err := os.ReadFile(filepath.Join(dir, recordFile))
			if err != nil {
				t.Fatal(err)
			}
			var rec Record
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			st := rec.State
			if rec.RemovalInProgress || !st.Dead || st.Status != container.StateDead || st.Running || st.ExitCode != tc.wantCode {
				t.Errorf("recorded %+v (removal in progress: %v), want dead with exit %d", st, rec.RemovalInProgress, tc.wantCode)
			}
			if st.StartedAt != tc.state.StartedAt || st.FinishedAt == "" {
				t.Errorf("times %q %q, want StartedAt kept and FinishedAt set", st.StartedAt, st.FinishedAt)
			}

			attempted, err := c.start(context.Background(), "victim")
			if attempted || !errdefs.IsConflict(err) || err.Error() != "container is marked for removal and cannot be started" {
				t.Errorf("start of a dead container: attempted %v, %v; want dockerd's conflict, refused", attempted, err)
			}
			if err := m.remove(context.Background(), c, "victim", RemoveOptions{}); err != nil {
				t.Fatalf("docker rm of a dead container: %v", err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("its directory is still there: %v", err)
			}
			if _, err := m.lookup("victim"); !errdefs.IsNotFound(err) {
				t.Errorf("lookup after the removal: %v, want not found", err)
			}
		})
	}
}

// TestAutoRemoveOnRestore: a --rm container that does not run after a
// daemon restart is removed, as dockerd removes it at its start: one
// whose VM did not survive, one that had exited with no daemon there to
// remove it, one never started, and one the previous daemon died
// removing. A container without --rm is kept.
func TestAutoRemoveOnRestore(t *testing.T) {
	running := container.State{Status: container.StateRunning, Running: true, StartedAt: "2026-11-22T10:00:00Z"}
	exited := container.State{Status: container.StateExited, ExitCode: 0, StartedAt: "2026-11-22T10:00:00Z",
		FinishedAt: "2026-11-22T10:01:00Z"}
	for _, tc := range []struct {
		name       string
		autoRemove bool
		state      container.State
		removing   bool
		wantKept   container.ContainerState // the status kept, or "" for removed
	}{
		{"VM gone", true, running, false, ""},
		{"exited", true, exited, false, ""},
		{"created", true, container.State{Status: container.StateCreated}, false, ""},
		{"removal unfinished", true, running, true, ""},
		{"VM gone without --rm", false, running, false, container.StateExited},
		{"exited without --rm", false, exited, false, container.StateExited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{byID: map[string]*ctr{}, byName: map[string]*ctr{}, log: slog.New(slog.DiscardHandler)}
			dir := t.TempDir()
			id := strings.Repeat("cd", 32)
			c, err := m.newCtr(dir, Record{ID: id, Name: "gone", Config: &container.Config{},
				HostConfig: &container.HostConfig{AutoRemove: tc.autoRemove}, State: tc.state, RemovalInProgress: tc.removing})
			if err != nil {
				t.Fatal(err)
			}
			m.byID[id], m.byName["gone"] = c, c

			m.Restore(context.Background())
			_, lookupErr := m.lookup("gone")
			_, statErr := os.Stat(dir)
			if tc.wantKept == "" {
				if !errdefs.IsNotFound(lookupErr) || !os.IsNotExist(statErr) {
					t.Errorf("after the restore: lookup %v, directory %v; want the container removed", lookupErr, statErr)
				}
				return
			}
			if lookupErr != nil || statErr != nil {
				t.Fatalf("after the restore: lookup %v, directory %v; want the container kept", lookupErr, statErr)
			}
			if got := c.rec.State.Status; got != tc.wantKept {
				t.Errorf("kept as %s, want %s", got, tc.wantKept)
			}
		})
	}
}
