package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// minimalQEMUEnv names the QEMU `make qemu` builds; `make test` builds it
// and sets this.
const minimalQEMUEnv = "HUSK_E2E_QEMU"

// vmmBinary is the executable of the VMM that runs container name.
func vmmBinary(t *testing.T, name string) string {
	t.Helper()
	pid := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Pid}}", name))
	exe, err := os.Readlink(fmt.Sprintf("/proc/%s/exe", pid))
	if err != nil {
		t.Fatalf("%s's VMM (pid %s): %v", name, pid, err)
	}
	return exe
}

// TestMinimalQEMU: huskd --qemu runs the QEMU `make qemu` builds, and
// snapshots move between it and Debian's binary both ways, because its
// machines have exactly Debian's devices (runtime/vmm/qemu/minimal): a
// checkpoint made under Debian's binary restores under the minimal one
// and counts on, one made under the minimal one restores under Debian's,
// and the image template Debian's binary made starts containers under
// the minimal one without falling back to a cold boot.
func TestMinimalQEMU(t *testing.T) {
	requireHusk(t)
	if suite.VMM != "qemu" {
		t.Skip("the minimal QEMU replaces QEMU; this daemon runs " + suite.VMM)
	}
	p := os.Getenv(minimalQEMUEnv)
	if p == "" {
		t.Skip("no minimal QEMU: build one with `make qemu` and set " + minimalQEMUEnv + " to it (make test does both)")
	}
	minimal, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatalf("%s=%s: %v", minimalQEMUEnv, p, err)
	}
	img := pulled(t, testimages.Busybox)
	waitTemplate(t)
	waitImageTemplate(t, img, 0)

	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", counterScript)
	debian := vmmBinary(t, name)
	if debian == minimal {
		t.Fatalf("the daemon without --qemu runs %s, the minimal QEMU", debian)
	}
	waitSteps(t, name, 3)
	// across checkpoints name, restarts the daemon with args, restores
	// name, and checks that it runs under want and counts on.
	across := func(checkpoint, args, want string) {
		t.Helper()
		mustDocker(t, "checkpoint", "create", name, checkpoint)
		at := steps(t, name)
		if err := control.do("restart-with" + args); err != nil {
			t.Fatalf("restart huskd with%q: %v", args, err)
		}
		mustDocker(t, "start", "--checkpoint", checkpoint, name)
		if got := vmmBinary(t, name); got != want {
			t.Errorf("restored by a daemon with%q, %s runs %s; want %s", args, name, got, want)
		}
		continuesFrom(t, name, waitSteps(t, name, len(at)+2), len(at), lastCount(at))
	}
	t.Cleanup(func() {
		if err := control.do("restart-with"); err != nil {
			t.Fatalf("restart huskd with Debian's QEMU: %v", err)
		}
	})
	across("under-debian", " --qemu "+p, minimal)

	// A start from the image's template, made by Debian's binary.
	fresh := containerName(t, "-fresh")
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", fresh, img, "sleep", "60"))
	if !restoredFrom(t, id, "image") {
		t.Errorf("%s did not start from the image's template under --qemu (%s)", fresh, suite.DaemonLog)
	}
	if got := vmmBinary(t, fresh); got != minimal {
		t.Errorf("started under --qemu, %s runs %s; want %s", fresh, got, minimal)
	}
	if got, want := strings.TrimSpace(mustDocker(t, "exec", fresh, "echo", "ok")), "ok"; got != want {
		t.Errorf("exec in %s = %q, want %q", fresh, got, want)
	}
	mustDocker(t, "rm", "-f", fresh)

	across("under-minimal", "", debian)
	mustDocker(t, "rm", "-f", name)
}
