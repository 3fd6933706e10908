package containers

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestValidateCpuset(t *testing.T) {
	have, err := hostCPUs()
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"":     "",
		"0":    "",
		"0-":   "Invalid value 0- for cpuset cpus",
		"a":    "Invalid value a for cpuset cpus",
		"4095": "Requested CPUs are not available - requested 4095, available: " + have.String(),
	} {
		err := validateCpuset(in)
		if want == "" && err != nil || want != "" && (err == nil || err.Error() != want) {
			t.Errorf("validateCpuset(%q) = %v, want %q", in, err, want)
		}
	}
}

// TestPinVMM: every thread of the process is moved to the set, and ""
// gives it back every CPU the daemon has.
func TestPinVMM(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	allowed := func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	if err := pinVMM(cmd.Process.Pid, "0"); err != nil {
		t.Fatal(err)
	}
	if got := allowed(); got != "0" {
		t.Errorf("after pinning to 0: Cpus_allowed_list %q", got)
	}
	have, _ := hostCPUs()
	if err := pinVMM(cmd.Process.Pid, ""); err != nil {
		t.Fatal(err)
	}
	if got := allowed(); got != have.String() {
		t.Errorf("after unpinning: Cpus_allowed_list %q, want %s", got, have)
	}
}
