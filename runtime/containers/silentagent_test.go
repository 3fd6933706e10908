package containers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/host/hosttest"
	"github.com/husk-vm/husk/shim/proto"
)

// slowAgent is a guest agent that answers a freeze or a change of
// limits only once release is closed, as a wedged guest's would once it
// runs again, and every thaw at once. It records the ops it has carried
// out.
type slowAgent struct {
	release chan struct{}
	mu      sync.Mutex
	done    []string
}

func (a *slowAgent) ops() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.done)
}

// serve answers the session a host.Client opens over conn.
func (a *slowAgent) serve(conn net.Conn) {
	hosttest.Serve(conn, func(req proto.Request) (proto.Response, bool) {
		var op string
		switch {
		case req.Op == proto.OpFreeze && req.Freeze != nil && !req.Freeze.Frozen:
			op = "thaw"
		case req.Op == proto.OpFreeze && req.Freeze != nil:
			op = "freeze"
			<-a.release
		case req.Op == proto.OpLimits && req.Limits != nil:
			op = fmt.Sprintf("limits %d", req.Limits.PidsLimit)
			if req.Limits.MemoryLimit != 0 {
				op += fmt.Sprintf(" memory %d", req.Limits.MemoryLimit)
			}
			<-a.release
		default:
			return proto.Response{}, false
		}
		a.mu.Lock()
		a.done = append(a.done, op)
		a.mu.Unlock()
		return proto.Response{Version: proto.Version}, true
	})
}

// stoppableVM is a VM whose vCPUs can be stopped and run again.
type stoppableVM struct {
	vmm.Machine
	mu      sync.Mutex
	stopped bool
}

func (v *stoppableVM) Pause(context.Context) error  { v.set(true); return nil }
func (v *stoppableVM) Resume(context.Context) error { v.set(false); return nil }
func (v *stoppableVM) set(stopped bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stopped = stopped
}

// silentGuest is a running container whose agent is a slowAgent.
func silentGuest(t *testing.T) (*Manager, *ctr, *slowAgent, *stoppableVM) {
	t.Helper()
	agent := &slowAgent{release: make(chan struct{})}
	hostEnd, guestEnd := net.Pipe()
	go agent.serve(guestEnd)
	client, err := host.New(hostEnd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	vm := &stoppableVM{}
	m := &Manager{byID: map[string]*ctr{}, byName: map[string]*ctr{}, log: slog.New(slog.DiscardHandler)}
	c := &ctr{m: m, dir: t.TempDir(), rec: Record{ID: "0123456789abcdef0123", Name: "silent",
		Config: &container.Config{}, HostConfig: &container.HostConfig{},
		State: container.State{Status: container.StateRunning, Running: true}}}
	c.run = &run{machine: vm, client: client}
	m.byID[c.rec.ID], m.byName[c.rec.Name] = c, c
	return m, c, agent, vm
}

// eventuallyOps waits for the agent to have carried out want.
func eventuallyOps(t *testing.T, agent *slowAgent, want ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !slices.Equal(agent.ops(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent carried out %q, want %q", agent.ops(), want)
		}
	}
}

// TestPauseOfASilentGuest: a pause whose freeze the guest does not answer
// stops the VM instead, and returns; the freeze the guest carries out
// later is thawed by the unpause, and not before.
func TestPauseOfASilentGuest(t *testing.T) {
	t.Parallel()
	m, c, agent, vm := silentGuest(t)
	if err := m.Pause(context.Background(), "silent"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if !vm.stopped || !c.run.vmPaused || !c.rec.State.Paused {
		t.Fatalf("after the pause: vCPUs stopped %v, vmPaused %v, recorded paused %v; want all", vm.stopped, c.run.vmPaused, c.rec.State.Paused)
	}
	close(agent.release) // the guest runs again, behind the daemon's back
	eventuallyOps(t, agent, "freeze")
	time.Sleep(100 * time.Millisecond) // room for a wrong thaw
	if got := agent.ops(); !slices.Equal(got, []string{"freeze"}) {
		t.Fatalf("while paused the agent carried out %q: a paused container was thawed", got)
	}
	if err := m.Unpause(context.Background(), "silent"); err != nil {
		t.Fatalf("unpause: %v", err)
	}
	if vm.stopped || c.rec.State.Paused {
		t.Errorf("after the unpause: vCPUs stopped %v, recorded paused %v", vm.stopped, c.rec.State.Paused)
	}
	eventuallyOps(t, agent, "freeze", "thaw")
}

// TestLateFreezeUndone: a snapshot's freeze the guest does not answer
// fails within agentTimeout, and is thawed once the guest carries it out.
func TestLateFreezeUndone(t *testing.T) {
	t.Parallel()
	_, c, agent, _ := silentGuest(t)
	c.mu.Lock()
	frozen, err := c.freezeProcesses(context.Background(), c.run, "snapshot")
	c.mu.Unlock()
	if frozen || !errors.Is(err, errAgentSilent) {
		t.Fatalf("freeze of a silent guest: frozen %v, %v; want errAgentSilent", frozen, err)
	}
	close(agent.release)
	eventuallyOps(t, agent, "freeze", "thaw")
}

// TestLatePidsLimitUndone: docker update --pids-limit of a running
// container whose guest does not answer fails within agentTimeout and
// records nothing; the limit the guest sets later is set back to the
// recorded one.
func TestLatePidsLimitUndone(t *testing.T) {
	t.Parallel()
	m, c, agent, _ := silentGuest(t)
	limit := int64(50)
	_, err := m.Update(context.Background(), "silent", UpdateOptions{Resources: container.Resources{PidsLimit: &limit}})
	if !errors.Is(err, errAgentSilent) {
		t.Fatalf("update of a silent guest: %v, want errAgentSilent", err)
	}
	c.mu.Lock()
	recorded := c.rec.HostConfig.PidsLimit
	c.mu.Unlock()
	if recorded != nil {
		t.Errorf("the failed update recorded a pids limit of %d", *recorded)
	}
	close(agent.release)
	eventuallyOps(t, agent, "limits 50", "limits 0")
}

// TestLiveMemoryUpdate: docker update --memory of a running container
// sets its cgroup's limit in the guest when the new limit fits the VM it
// started in, and is refused, changing nothing, when it does not.
func TestLiveMemoryUpdate(t *testing.T) {
	t.Parallel()
	m, c, agent, _ := silentGuest(t)
	close(agent.release)
	c.rec.HostConfig.Memory, c.rec.HostConfig.MemorySwap = 128<<20, 256<<20
	c.rec.VMMemoryMiB = memoryMiB(c.rec.HostConfig, 256, 0)
	if _, err := m.Update(context.Background(), "silent", UpdateOptions{Resources: container.Resources{Memory: 64 << 20}}); err != nil {
		t.Fatalf("update to a smaller limit: %v", err)
	}
	eventuallyOps(t, agent, "limits 0 memory 67108864")
	if _, err := m.Update(context.Background(), "silent", UpdateOptions{Resources: container.Resources{Memory: 128 << 20}}); err != nil {
		t.Fatalf("update back to the limit the VM was sized for: %v", err)
	}
	eventuallyOps(t, agent, "limits 0 memory 67108864", "limits 0 memory 134217728")
	_, err := m.Update(context.Background(), "silent", UpdateOptions{Resources: container.Resources{Memory: 1 << 30, MemorySwap: -1}})
	if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "cannot be resized while it runs") {
		t.Errorf("update beyond the VM: %v, want a conflict", err)
	}
	c.mu.Lock()
	recorded := c.rec.HostConfig.Memory
	c.mu.Unlock()
	if recorded != 128<<20 {
		t.Errorf("recorded memory %d after the refused update, want 128 MiB", recorded)
	}
	if got := agent.ops(); len(got) != 2 {
		t.Errorf("the refused update reached the guest: %q", got)
	}
}
