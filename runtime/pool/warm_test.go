package pool

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/runtime/templates/templatestest"
	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/agent/cinit"
	"github.com/husk-vm/husk/shim/proto"
)

// testInitExe is the container init the in-process agents start their
// warm-up's process with (cinit.Build), or "" where no C compiler is.
var testInitExe string

func TestMain(m *testing.M) {
	// The in-process agents re-execute this test binary as their archive
	// helper.
	agent.Reexec()
	os.Exit(cinit.RunTests(m.Run, &testInitExe))
}

// TestWarmBeforePause: with Disks set, each pooled VM had two blank disks
// plugged (a read-only base and an upper, named by the VM), its agent
// ran the throwaway container, and the disks were unplugged and their
// files removed before it was paused; the take then plugs the container's
// disks as the only ones.
func TestWarmBeforePause(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the warm-up runs a process in new namespaces")
	}
	if testInitExe == "" {
		t.Skip("needs a C compiler (musl-gcc or cc) to build the container init")
	}
	w := newWorld(t)
	disks := &templatestest.Disks{}
	w.disks = disks
	p := w.open(t, 1)
	p.Prepare(w.shape)
	waitFor(t, "a VM ready", func() bool { return p.Ready(w.shape) == 1 })
	ms := w.tpl.all()
	if len(ms) != 1 {
		t.Fatalf("%d restores, want 1", len(ms))
	}
	m := ms[0]
	m.mu.Lock()
	plugged, left := append(m.plugged[:0:0], m.plugged...), len(m.disks)
	m.mu.Unlock()
	if len(plugged) != 2 || !plugged[0].ReadOnly || plugged[1].ReadOnly ||
		!strings.HasPrefix(plugged[0].Serial, "warmb") || !strings.HasPrefix(plugged[1].Serial, "warmu") {
		t.Errorf("warm-up plugged %+v, want a read-only warmb… base and a warmu… upper", plugged)
	}
	if left != 0 {
		t.Errorf("%d disks still plugged after the warm-up", left)
	}
	made := disks.Made()
	for _, f := range made {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("warm-up disk %s not removed: %v", f, err)
		}
	}
	cfg := w.containerCfg(t, "c1")
	vm, err := p.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Client.Close()
	m.mu.Lock()
	got := append(m.disks[:0:0], m.disks...)
	m.mu.Unlock()
	if len(got) != 2 || got[0].Serial != "husk-base" || got[1].Serial != "husk-upper" {
		t.Errorf("taken VM has disks %+v, want only the container's", got)
	}
	// The agent was left unset: the container's setup goes through.
	if err := vm.Client.Setup(context.Background(), proto.SetupSpec{BaseSerial: "husk-base", UpperSerial: "husk-upper"}); err != nil {
		t.Errorf("setup after the warm-up: %v", err)
	}
	// The refill's warm-up writes into a temporary directory of this
	// test: it must be over before those are removed.
	p.Close()
}

// TestWarmFailureLeavesNothing: a warm-up that fails discards the VM
// with its TAPs and directory; nothing is pooled.
func TestWarmFailureLeavesNothing(t *testing.T) {
	w := newWorld(t)
	w.disks = &templatestest.Disks{Fail: true}
	p := w.open(t, 1)
	p.Prepare(w.shape)
	waitFor(t, "a restore failed", func() bool {
		for _, m := range w.tpl.all() {
			if _, _, killed := m.state(); killed {
				return true
			}
		}
		return false
	})
	p.Close()
	if n := p.Ready(w.shape); n != 0 {
		t.Errorf("%d VMs pooled though every warm-up failed", n)
	}
	if names := w.taps.names(); len(names) != 0 {
		t.Errorf("TAPs left: %v", names)
	}
	if es := dirEntries(t, w.dir); len(es) != 0 {
		t.Errorf("pool directory holds %v", es)
	}
}

// TestRefillHeldOffAfterTake: a take holds off its shape's refill for
// RefillDelay (here longer than the test), so the taken VM's container
// starts without a restore competing for the host.
func TestRefillHeldOffAfterTake(t *testing.T) {
	w := newWorld(t)
	p, err := New(context.Background(), Options{
		Dir: w.dir, Size: 1, Templates: w.tpl, Driver: w.drv, Kernel: "k", Initramfs: "i", Accel: "tcg",
		Taps: w.taps, Network: w.net, Retry: time.Millisecond, RefillDelay: time.Hour, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Prepare(w.shape)
	waitFor(t, "a VM ready", func() bool { return p.Ready(w.shape) == 1 })
	vm, err := p.Start(context.Background(), w.containerCfg(t, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Client.Close()
	// Without the hold-off a restore starts at once; give it ample time.
	time.Sleep(200 * time.Millisecond)
	if n := len(w.tpl.all()); n != 1 {
		t.Errorf("%d restores right after the take, want the refill held off", n)
	}
	p.Close()
}
