package containers

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmtest"
	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/proto"
)

// lockupLine is what a guest's watchdog printed in a boot that hung.
const lockupLine = "[   28.113862] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [swapper/0:1]"

// lockingDriver boots machines of which the first `lockups` report a
// soft lockup on their console and never answer; the rest serve an
// in-process agent.
type lockingDriver struct {
	vmm.Driver
	t       *testing.T
	lockups int

	mu     sync.Mutex
	starts []vmm.Config
	killed int
}

func (d *lockingDriver) Start(_ context.Context, cfg vmm.Config) (vmm.Machine, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.starts = append(d.starts, cfg)
	m := &lockingMachine{d: d, locked: len(d.starts) <= d.lockups, Process: vmmtest.NewProcess(func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.killed++
	})}
	// A VMM writes its console afresh.
	console := "[    0.000000] Linux version 6.1.0\n"
	if m.locked {
		console += lockupLine + "\n"
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, consoleLog), []byte(console), 0o600); err != nil {
		return nil, err
	}
	return m, nil
}

type lockingMachine struct {
	d      *lockingDriver
	locked bool
	*vmmtest.Process
}

func (m *lockingMachine) PID() int                               { return 1 }
func (m *lockingMachine) Pause(context.Context) error            { return nil }
func (m *lockingMachine) Resume(context.Context) error           { return nil }
func (m *lockingMachine) Snapshot(context.Context, string) error { return errors.ErrUnsupported }
func (m *lockingMachine) Shutdown(context.Context) error         { return m.Kill() }

func (m *lockingMachine) DialAgent(context.Context) (net.Conn, error) {
	hostEnd, agentEnd := net.Pipe()
	if m.locked {
		return hostEnd, nil
	}
	a, err := agent.New(agent.Options{Rootfs: agent.DirRootfs(m.d.t.TempDir()), StateDir: m.d.t.TempDir(), Refresher: nopRefresher{}})
	if err != nil {
		return nil, err
	}
	go func() {
		_ = a.ServeConn(context.Background(), agentEnd)
		a.Close()
	}()
	return hostEnd, nil
}

func (m *lockingMachine) DescribeStall(context.Context) vmm.Stall {
	return vmm.Stall{State: "running", CPUs: []vmm.StalledCPU{{PC: 0xffffffff814a4815}}}
}

type nopRefresher struct{}

func (nopRefresher) SetClock(time.Time) error                            { return nil }
func (nopRefresher) Reseed([]byte) error                                 { return nil }
func (nopRefresher) Readdress(context.Context, *proto.NetworkSpec) error { return nil }
func (nopRefresher) SetHostname(int, string) error                       { return nil }

// TestBootAgainAfterLockup: a boot whose kernel reports a soft lockup is
// described, killed and booted again, with its shares started again; a
// second lockup fails the start with it; a boot that answers is not
// watched past its answer.
func TestBootAgainAfterLockup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lockups int
		shares  bool
		wantErr bool
	}{
		{"no lockup", 0, false, false},
		{"one lockup", 1, false, false},
		{"one lockup with shares", 1, true, false},
		{"two lockups", 2, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &lockingDriver{t: t, lockups: tc.lockups}
			var logBuf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logBuf, nil))
			// The boot's deadline is far off: only a lockup ends a wait soon.
			g := Guest{Driver: d, ReadyTimeout: 30 * time.Second}
			dir := t.TempDir()
			spec := vmSpec{id: "c1", dir: dir, shares: []vmm.Share{{Tag: "husk0", Socket: "old.sock"}}, backends: []int{7}}
			var reshared int
			if tc.shares {
				spec.reshare = func(context.Context) ([]vmm.Share, []int, error) {
					reshared++
					return []vmm.Share{{Tag: "husk0", Socket: "new.sock"}}, []int{8}, nil
				}
			}
			machine, client, err := g.startVM(context.Background(), log, spec)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "soft lockup - CPU#0 stuck for 26s") {
					t.Fatalf("startVM after %d lockups: err = %v, want the lockup", tc.lockups, err)
				}
			} else {
				if err != nil {
					t.Fatalf("startVM: %v", err)
				}
				client.Close()
				killVM(machine)
			}
			boots := min(tc.lockups+1, bootAttempts)
			if len(d.starts) != boots {
				t.Errorf("%d boots, want %d", len(d.starts), boots)
			}
			if d.killed != boots {
				t.Errorf("%d VMs killed, want %d", d.killed, boots)
			}
			out := logBuf.String()
			if got, want := strings.Count(out, "guest agent did not answer"), tc.lockups; got != want {
				t.Errorf("%d stall reports, want %d:\n%s", got, want, out)
			}
			if got, want := strings.Count(out, "booting it again"), min(tc.lockups, bootAttempts-1); got != want {
				t.Errorf("%d warnings of a boot again, want %d:\n%s", got, want, out)
			}
			if tc.lockups > 0 {
				if !strings.Contains(out, "0xffffffff814a4815") {
					t.Errorf("the report lacks the stuck vCPU:\n%s", out)
				}
				// The first boot's console is kept.
				if b, err := os.ReadFile(filepath.Join(dir, consoleLog+".lockup")); err != nil || !bytes.Contains(b, []byte(lockupLine)) {
					t.Errorf("first boot's console: %q, %v", b, err)
				}
			}
			if tc.shares && tc.lockups > 0 {
				if reshared != 1 {
					t.Errorf("shares started again %d times, want 1", reshared)
				}
				if got := d.starts[1].Shares; len(got) != 1 || got[0].Socket != "new.sock" {
					t.Errorf("second boot's shares = %+v, want the new ones", got)
				}
			}
		})
	}
}

// TestBootGivenUpNotAgain: a boot the caller gives up on is not booted
// again, lockup or not.
func TestBootGivenUpNotAgain(t *testing.T) {
	d := &lockingDriver{t: t, lockups: 2}
	g := Guest{Driver: d, ReadyTimeout: 30 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := g.startVM(ctx, slog.New(slog.DiscardHandler), vmSpec{id: "c1", dir: t.TempDir()})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("startVM with a cancelled context: err = %v, want context.Canceled", err)
	}
	if len(d.starts) != 1 {
		t.Errorf("%d boots, want 1", len(d.starts))
	}
}
