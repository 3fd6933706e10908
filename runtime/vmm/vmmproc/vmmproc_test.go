package vmmproc

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadPID(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    int
		ok      bool
	}{
		{"1234\n", 1234, true},
		{"0\n", 0, false},
		{"x", 0, false},
	} {
		if err := WriteFileAtomic(filepath.Join(dir, "pid"), []byte(tc.content)); err != nil {
			t.Fatal(err)
		}
		got, err := ReadPID(dir, "pid")
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("pid file %q: %d, %v; want %d, ok %t", tc.content, got, err, tc.want, tc.ok)
		}
	}
}

// A process is recognised by its working directory, this test's own.
func TestCmdlineIn(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cmdline, ok := CmdlineIn(os.Getpid(), wd)
	if !ok || len(cmdline) == 0 {
		t.Errorf("this process in %s: ok %t, cmdline %q", wd, ok, cmdline)
	}
	if _, ok := CmdlineIn(os.Getpid(), t.TempDir()); ok {
		t.Error("this process recognised in a directory it does not run in")
	}
}

func TestOutputTail(t *testing.T) {
	dir := t.TempDir()
	if got := OutputTail(filepath.Join(dir, "missing")); got[:10] != "no output:" {
		t.Errorf("missing log: %q", got)
	}
	long := make([]byte, 3000)
	for i := range long {
		long[i] = 'a'
	}
	p := filepath.Join(dir, "log")
	if err := os.WriteFile(p, append(long, []byte("end\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := OutputTail(p); len(got) != 2000 || got[len(got)-3:] != "end" {
		t.Errorf("tail of a long log: %d bytes ending %q", len(got), got[len(got)-3:])
	}
}
