package containers

import (
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
)

// TestLockOrder: a container's lock is taken before the manager's, never
// after. A daemon on a stress rig wedged when `docker system df` listed
// images while containers exited: the image store's listing, holding its
// lock, asked InUse, which held the manager's lock while it waited for an
// exiting container's, whose exit waited for the manager's lock; every
// start then waited for the image store.
func TestLockOrder(t *testing.T) {
	m := &Manager{byID: map[string]*ctr{}}
	busy := &ctr{m: m, imageID: "sha256:a", rec: Record{ID: "aaaa", ImageID: "sha256:a",
		State: container.State{Status: container.StateRunning, Running: true}}}
	idle := &ctr{m: m, imageID: "sha256:b", rec: Record{ID: "bbbb", ImageID: "sha256:b",
		State: container.State{Status: container.StateExited}}}
	m.byID["aaaa"], m.byID["bbbb"] = busy, idle

	// As a start does, holding the container's lock while the image
	// store's may be held by a listing that asks InUse.
	busy.mu.Lock()
	inUse := make(chan []string)
	go func() { inUse <- m.InUse("sha256:a") }()
	select {
	case got := <-inUse:
		if !slices.Equal(got, []string{"aaaa"}) {
			t.Errorf("InUse = %q, want [aaaa]", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("InUse waits for a container's lock")
	}

	// Counts waits for the busy container, but not holding the manager's
	// lock, which the busy container's holder takes next, as an exit
	// does (wantsRestart).
	type counts struct{ running, paused, stopped int }
	counted := make(chan counts)
	go func() {
		r, p, s := m.Counts()
		counted <- counts{r, p, s}
	}()
	time.Sleep(50 * time.Millisecond) // let Counts reach the busy container
	managerFree := make(chan bool)
	go func() { managerFree <- !m.isShuttingDown() }()
	select {
	case <-managerFree:
	case <-time.After(10 * time.Second):
		t.Fatal("Counts holds the manager's lock while it waits for a container's")
	}
	busy.mu.Unlock()
	if got, want := <-counted, (counts{running: 1, stopped: 1}); got != want {
		t.Errorf("Counts = %+v, want %+v", got, want)
	}
}
