// Package cinit holds the source of husk-init, the guest's container init
// (src/init.c; package agent's cinit_linux.go says what it does and why it is
// C), and builds it for tests. make build builds the guest's copy the same
// way.
package cinit

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed src/init.c
var source string

// Build compiles the init into dir with musl-gcc, or cc where musl is not
// installed, and returns its path. It returns "" and no error where
// neither compiler is installed, so that tests can skip.
func Build(dir string) (string, error) {
	cc := "musl-gcc"
	if _, err := exec.LookPath(cc); err != nil {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", nil
	}
	src, out := filepath.Join(dir, "init.c"), filepath.Join(dir, "husk-init")
	if err := os.WriteFile(src, []byte(source), 0o600); err != nil {
		return "", fmt.Errorf("write the container init's source: %w", err)
	}
	if b, err := exec.Command(cc, "-static", "-Os", "-Wall", "-Wextra", "-Werror", "-o", out, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the container init with %s: %v\n%s", cc, err, b)
	}
	return out, nil
}

// RunTests serves a TestMain whose tests start processes through the
// init: it builds the init into a temporary directory, sets *exe to its
// path ("" where no C compiler is, for the tests to skip), runs run (the
// testing.M's Run) and removes the directory. It returns run's code, or 2
// when the build fails.
func RunTests(run func() int, exe *string) int {
	dir, err := os.MkdirTemp("", "husk-init-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	if *exe, err = Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return run()
}
