//go:build linux

package agent

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// A thread inNamespacesOf throws away may have been chrooted by its start
// function; the process's main thread, which the runtime parks rather than
// ends, must never be that thread.
func TestThrownAwayThreadsAreNeverTheMainThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chroot")
	}
	jail := t.TempDir()
	mainRoot := fmt.Sprintf("/proc/self/task/%d/root", os.Getpid())
	for round := range 50 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := inNamespacesOf(os.Getpid(), func() (*os.Process, error) {
					return nil, unix.Chroot(jail)
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if root, err := os.Readlink(mainRoot); err != nil || root != "/" {
			t.Fatalf("round %d: main thread's root is %q (%v), want /", round, root, err)
		}
	}
}
