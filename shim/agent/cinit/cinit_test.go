package cinit_test

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/husk-vm/husk/shim/agent/cinit"
)

// TestBuild: the init builds; run with no operations on descriptor 3 (none
// is open) it fails as on a bad configuration, with 127, and run as the
// warm-up's program (husk-init-warm) it exits 0 at once.
func TestBuild(t *testing.T) {
	path, err := cinit.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if path == "" {
		t.Skip("needs a C compiler (musl-gcc or cc)")
	}
	var ee *exec.ExitError
	if err := exec.Command(path).Run(); !errors.As(err, &ee) || ee.ExitCode() != 127 {
		t.Errorf("run without operations: %v, want exit status 127", err)
	}
	warm := exec.Command(path)
	warm.Args = []string{"husk-init-warm"}
	if err := warm.Run(); err != nil {
		t.Errorf("run as husk-init-warm: %v, want exit 0", err)
	}
}
