package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestIdleTracker(t *testing.T) {
	const after = 10 * time.Second
	t0 := time.Unix(1000, 0)
	// Each step is a sample: seconds since t0, and CPU used so far in ms.
	type step struct {
		sec, cpuMS int
		release    bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a started VM released once after an idle stretch", []step{
			{0, 0, false}, {5, 10, false}, {10, 20, true}, {15, 30, false}, {30, 40, false},
		}},
		{"busy time restarts the stretch", []step{
			{0, 0, false}, {8, 10, false}, {9, 500, false}, {18, 510, false}, {19, 520, true},
		}},
		{"only busy time after a release re-arms it", []step{
			{0, 0, false}, {10, 0, true}, {25, 10, false}, {26, 300, false}, {35, 310, false}, {36, 310, true},
		}},
		{"a VM never idle is never released", []step{
			{0, 0, false}, {5, 1000, false}, {10, 2000, false}, {15, 3000, false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newIdleTracker(after)
			for _, s := range tc.steps {
				got := tr.observe(cpuSample{at: t0.Add(time.Duration(s.sec) * time.Second), cpu: time.Duration(s.cpuMS) * time.Millisecond})
				if got != s.release {
					t.Fatalf("at %ds (cpu %d ms): release %v, want %v", s.sec, s.cpuMS, got, s.release)
				}
			}
		})
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, as comm may have.
	stat := "4242 (qemu sys) x) S 1 4242 4242 0 -1 4194560 12011 0 0 0 250 37 0 0 20 0 5 0 12345 1 2\n"
	got, err := parseStatCPU([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2870 * time.Millisecond; got != want {
		t.Errorf("cpu = %v, want %v", got, want)
	}
	for _, bad := range []string{"4242 qemu S 1", "4242 (qemu) S 1 2 3"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	// This process has a stat of its own to read.
	if _, err := processCPU(os.Getpid()); err != nil {
		t.Error(err)
	}
}

// TestReleaseTranslationsQMP checks the monitor conversation of a
// release against a fake QEMU: a running VM is asked, a paused one is
// not, and a QEMU without the command refuses with a QMPError, which
// is what ends releaseWhenIdle's watch.
func TestReleaseTranslationsQMP(t *testing.T) {
	ok := `{"return": {}, "id": $ID}`
	status := func(s string) []string {
		return []string{`{"return": {"status": "` + s + `", "running": ` + fmt.Sprint(s == "running") + `}, "id": $ID}`}
	}
	tests := []struct {
		name     string
		status   string
		release  []string
		released bool
		refused  bool
		sent     []string
	}{
		{"running", "running", []string{ok}, true, false, []string{"qmp_capabilities", "query-status", ReleaseCommand}},
		{"paused", "paused", nil, false, false, []string{"qmp_capabilities", "query-status"}},
		{"incoming", "inmigrate", nil, false, false, []string{"qmp_capabilities", "query-status"}},
		{"no such command", "running", []string{`{"error": {"class": "CommandNotFound", "desc": "The command x-husk-tcg-release has not been found"}, "id": $ID}`},
			false, true, []string{"qmp_capabilities", "query-status", ReleaseCommand}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t.TempDir(), nil, 42, slog.New(slog.DiscardHandler))
			seen := fakeQMP(t, m.path(qmpSocket), map[string][]string{
				"qmp_capabilities": {ok}, "query-status": status(tc.status), ReleaseCommand: tc.release,
			})
			released, err := m.releaseTranslations(context.Background())
			var refused *QMPError
			if released != tc.released || errors.As(err, &refused) != tc.refused || (err != nil && !tc.refused) {
				t.Errorf("released %v, err %v; want released %v, refused %v", released, err, tc.released, tc.refused)
			}
			if got := <-seen; !slices.Equal(got, tc.sent) {
				t.Errorf("sent %q, want %q", got, tc.sent)
			}
		})
	}
}

// TestReleaseBootImagesQMP checks the monitor conversation that gives
// back a booted VM's boot images, and that a QEMU without the command
// refuses with a QMPError.
func TestReleaseBootImagesQMP(t *testing.T) {
	ok := `{"return": {}, "id": $ID}`
	tests := []struct {
		name    string
		reply   string
		refused bool
	}{
		{"released", ok, false},
		{"no such command", `{"error": {"class": "CommandNotFound", "desc": "The command x-husk-release-boot-images has not been found"}, "id": $ID}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t.TempDir(), nil, 42, slog.New(slog.DiscardHandler))
			seen := fakeQMP(t, m.path(qmpSocket), map[string][]string{
				"qmp_capabilities": {ok}, ReleaseBootImagesCommand: {tc.reply},
			})
			err := m.ReleaseBootImages(context.Background())
			var refused *QMPError
			if errors.As(err, &refused) != tc.refused || (err != nil && !tc.refused) {
				t.Errorf("err %v; want refused %v", err, tc.refused)
			}
			if got, want := <-seen, []string{"qmp_capabilities", ReleaseBootImagesCommand}; !slices.Equal(got, want) {
				t.Errorf("sent %q, want %q", got, want)
			}
		})
	}
}

// TestOwnCommandsRemembered checks that once a binary's QEMU has said it
// has no such command, the binary's other VMs are not asked again, while
// another binary's still are, and that other refusals teach nothing. The
// machines' processes are stand-ins: what is known of a binary is keyed
// by the file its process runs.
func TestOwnCommandsRemembered(t *testing.T) {
	ok := `{"return": {}, "id": $ID}`
	notFound := `{"error": {"class": "CommandNotFound", "desc": "The command x-husk-release-boot-images has not been found"}, "id": $ID}`
	generic := `{"error": {"class": "GenericError", "desc": "the VM may reset"}, "id": $ID}`
	running := func(name string, args ...string) int {
		t.Helper()
		cmd := exec.Command(name, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	// Two processes of one binary, as two VMs of one QEMU, and one of
	// another.
	debian, debian2, minimal := running("sleep", "60"), running("sleep", "60"), running("tail", "-f", "/dev/null")
	var own ownCommands
	machine := func(pid int) *Machine {
		m := newMachine(t.TempDir(), nil, pid, slog.New(slog.DiscardHandler))
		m.own = &own
		return m
	}
	// ask has the VM of pid ask for the release, its QEMU answering reply
	// ("" for no QEMU at all), and reports whether it was asked.
	ask := func(pid int, reply string) (error, bool) {
		t.Helper()
		m := machine(pid)
		var seen <-chan []string
		if reply != "" {
			seen = fakeQMP(t, m.path(qmpSocket), map[string][]string{"qmp_capabilities": {ok}, ReleaseBootImagesCommand: {reply}})
		}
		err := m.ReleaseBootImages(context.Background())
		if seen == nil {
			return err, false
		}
		return err, slices.Contains(<-seen, ReleaseBootImagesCommand)
	}
	steps := []struct {
		name        string
		pid         int
		reply       string
		wantAsked   bool
		unsupported bool
	}{
		{"a refusal for another reason", debian, generic, true, false},
		{"asked again after it", debian, notFound, true, false},
		{"not asked once known", debian2, "", false, true},
		{"another binary is asked", minimal, ok, true, false},
		{"and again, having answered", minimal, ok, true, false},
	}
	for _, s := range steps {
		err, asked := ask(s.pid, s.reply)
		if asked != s.wantAsked || errors.Is(err, errors.ErrUnsupported) != s.unsupported {
			t.Errorf("%s: asked %v, err %v; want asked %v, unsupported %v", s.name, asked, err, s.wantAsked, s.unsupported)
		}
	}
	if err := machine(debian).lacking(ReleaseCommand); err != nil {
		t.Errorf("a command never refused: %v", err)
	}
	// A VM whose binary cannot be told (its process is gone) is asked.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if err := machine(gone.Process.Pid).lacking(ReleaseBootImagesCommand); err != nil {
		t.Errorf("a VM of an unknown binary: %v", err)
	}
}
