//go:build linux

package agent

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// The kernel's race cannot be provoked on demand, so the test makes its
// shape: the master reads EIO (every slave closed) while the process runs,
// and bytes arrive after that EIO (the slave reopened and written). The
// output must wait for the exit and then hold those bytes.
func TestTerminalOutputWaitsForExitAfterEIO(t *testing.T) {
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	name := slave.Name()
	slave.Close()
	if _, err := master.Read(make([]byte, 8)); !errors.Is(err, unix.EIO) {
		t.Fatalf("read with every slave closed: %v, want EIO", err)
	}

	exited := make(chan struct{})
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(&terminalOutput{f: master, exited: exited})
		done <- result{string(b), err}
	}()
	select {
	case r := <-done:
		t.Fatalf("output ended (%q, %v) before the process exited", r.out, r.err)
	case <-time.After(100 * time.Millisecond):
	}

	late, err := os.OpenFile(name, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.WriteString("late\n"); err != nil {
		t.Fatal(err)
	}
	late.Close()
	close(exited)
	r := <-done
	// A read ending in EIO is how every terminal's output ends; the pump
	// treats any error as the end.
	if r.out != "late\r\n" || !errors.Is(r.err, unix.EIO) {
		t.Fatalf("output %q, %v; want %q, EIO", r.out, r.err, "late\r\n")
	}
}
