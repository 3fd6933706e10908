package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionAsksOncePerBinary: the version is asked of the binary once,
// and again when the file behind its name is replaced, as an upgrade
// replaces it.
func TestVersionAsksOncePerBinary(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	bin := filepath.Join(dir, "qemu-system-x86_64")
	install := func(version string) {
		t.Helper()
		script := fmt.Sprintf("#!/bin/sh\necho x >> %s\necho 'QEMU emulator version %s (Debian)'\necho 'Copyright'\n", calls, version)
		tmp := bin + ".new"
		if err := os.WriteFile(tmp, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, bin); err != nil {
			t.Fatal(err)
		}
	}
	asked := func() int {
		b, err := os.ReadFile(calls)
		if err != nil {
			return 0
		}
		return strings.Count(string(b), "x")
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	d := New(Options{})
	ctx := context.Background()

	install("7.2.19")
	for _, step := range []struct {
		name  string
		do    func()
		want  string
		asked int
	}{
		{"first", func() {}, fmt.Sprintf("qemu 7.2.19 (devices v%d)", pciSlotPlan), 1},
		{"again", func() {}, fmt.Sprintf("qemu 7.2.19 (devices v%d)", pciSlotPlan), 1},
		{"upgraded", func() { install("7.2.20") }, fmt.Sprintf("qemu 7.2.20 (devices v%d)", pciSlotPlan), 2},
		{"after the upgrade", func() {}, fmt.Sprintf("qemu 7.2.20 (devices v%d)", pciSlotPlan), 2},
	} {
		step.do()
		got, err := d.Version(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got != step.want || asked() != step.asked {
			t.Errorf("%s: Version = %q after %d runs of the binary, want %q after %d", step.name, got, asked(), step.want, step.asked)
		}
	}

	// With the binary gone, the cached version must not stand in for it.
	t.Setenv("PATH", dir)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Version(ctx); err == nil {
		t.Errorf("Version with the binary gone = %q, want an error", v)
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u16)\nCopyright (c) 2003-2022\n", "qemu 7.2.19"},
		{"Something else 1.0\n", "Something else 1.0"},
	} {
		if got, want := parseVersion(tc.out), fmt.Sprintf("%s (devices v%d)", tc.want, pciSlotPlan); got != want {
			t.Errorf("parseVersion(%q) = %q, want %q", tc.out, got, want)
		}
	}
}
