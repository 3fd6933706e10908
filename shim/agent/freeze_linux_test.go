package agent_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/proto"
)

// fakeCgroups records what the agent asks of the container's cgroup.
type fakeCgroups struct {
	mu        sync.Mutex
	calls     []string
	freezeErr error
}

func (f *fakeCgroups) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeCgroups) took() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeCgroups) Create(proto.LimitsSpec) (string, error) {
	f.record("create")
	return "/sys/fs/cgroup/fake", nil
}

func (f *fakeCgroups) SetLimits(proto.LimitsSpec) error { f.record("limits"); return nil }

func (f *fakeCgroups) Adopt() error { f.record("adopt"); return nil }

func (f *fakeCgroups) Freeze(_ context.Context, frozen bool) error {
	if frozen {
		f.record("freeze")
		return f.freezeErr
	}
	f.record("thaw")
	return nil
}

// The container's processes are put in a cgroup and frozen for a snapshot,
// and a restored copy's are thawed only once its refresh has reseeded the
// RNG.
func TestFreezeForSnapshot(t *testing.T) {
	cg := &fakeCgroups{}
	r := &slowReseed{release: make(chan struct{})}
	c := serveAgent(t, agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(makeRoot(t)), StateDir: t.TempDir(), Refresher: r, Cgroups: cg})

	// Before a setup there is no container, and nothing to freeze.
	if err := c.Freeze(ctx(t), true); err != nil {
		t.Fatalf("freeze without a container: %v", err)
	}
	if got := cg.took(); len(got) != 0 {
		t.Fatalf("freeze without a container asked the cgroup for %v", got)
	}
	setup(t, c)
	if err := c.Freeze(ctx(t), true); err != nil {
		t.Fatalf("freeze: %v", err)
	}
	if got, want := cg.took(), []string{"create", "adopt", "freeze"}; !slices.Equal(got, want) {
		t.Fatalf("freeze asked the cgroup for %v, want %v", got, want)
	}

	// As after a restore: the refresh's reseed is still running.
	if err := c.Refresh(ctx(t), proto.RefreshSpec{Entropy: make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	thawed := make(chan error, 1)
	go func() { thawed <- c.Freeze(ctx(t), false) }()
	select {
	case err := <-thawed:
		t.Fatalf("thawed before the reseed ended (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(r.release)
	if err := <-thawed; err != nil {
		t.Fatalf("thaw: %v", err)
	}
	if got := cg.took(); got[len(got)-1] != "thaw" {
		t.Fatalf("cgroup calls %v end without a thaw", got)
	}

	// Thawing what is not frozen does nothing; a second freeze reuses
	// the group.
	n := len(cg.took())
	if err := c.Freeze(ctx(t), false); err != nil || len(cg.took()) != n {
		t.Fatalf("a second thaw: %v, cgroup calls %v", err, cg.took()[n:])
	}
	if err := c.Freeze(ctx(t), true); err != nil {
		t.Fatal(err)
	}
	if got, want := cg.took()[n:], []string{"freeze"}; !slices.Equal(got, want) {
		t.Fatalf("second freeze asked the cgroup for %v, want %v", got, want)
	}
}

// A freeze that does not complete is undone and reported.
func TestFreezeFailureThaws(t *testing.T) {
	cg := &fakeCgroups{freezeErr: errors.New("a process would not freeze")}
	c := serveAgent(t, agent.Options{InitExe: testInitExe, Rootfs: agent.DirRootfs(makeRoot(t)), StateDir: t.TempDir(), Refresher: &fakeRefresher{}, Cgroups: cg})
	setup(t, c)
	err := c.Freeze(ctx(t), true)
	if err == nil {
		t.Fatal("a failed freeze answered success")
	}
	if got, want := cg.took(), []string{"create", "adopt", "freeze", "thaw"}; !slices.Equal(got, want) {
		t.Fatalf("failed freeze asked the cgroup for %v, want %v", got, want)
	}
	// Nothing is left frozen, so a thaw has nothing to do.
	n := len(cg.took())
	if err := c.Freeze(ctx(t), false); err != nil || len(cg.took()) != n {
		t.Fatalf("thaw after a failed freeze: %v, cgroup calls %v", err, cg.took()[n:])
	}
}
