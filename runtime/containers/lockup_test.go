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
	// retranslate gives machines a Retranslate, which frees a locked
	// guest when cures is set and otherwise leaves it to report its
	// lockup again; retranslateErr is its error.
	retranslate    bool
	cures          bool
	retranslateErr error

	mu             sync.Mutex
	starts         []vmm.Config
	killed         int
	retranslations int
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
	m.console = filepath.Join(cfg.Dir, consoleLog)
	if err := os.WriteFile(m.console, []byte(console), 0o600); err != nil {
		return nil, err
	}
	if d.retranslate {
		return retranslatingMachine{m}, nil
	}
	return m, nil
}

type lockingMachine struct {
	d       *lockingDriver
	console string
	// locked and retranslated are guarded by d.mu.
	locked       bool
	retranslated bool
	*vmmtest.Process
}

// retranslatingMachine is a lockingMachine whose VMM can translate its
// guest's code afresh.
type retranslatingMachine struct{ *lockingMachine }

func (m retranslatingMachine) Retranslate(context.Context) (int, error) {
	d := m.d
	d.mu.Lock()
	defer d.mu.Unlock()
	d.retranslations++
	if d.retranslateErr != nil {
		return 0, d.retranslateErr
	}
	m.retranslated = true
	if d.cures {
		m.locked = false
	}
	return 1, nil
}

func (m *lockingMachine) PID() int                               { return 1 }
func (m *lockingMachine) Pause(context.Context) error            { return nil }
func (m *lockingMachine) Resume(context.Context) error           { return nil }
func (m *lockingMachine) Snapshot(context.Context, string) error { return errors.ErrUnsupported }
func (m *lockingMachine) Shutdown(context.Context) error         { return m.Kill() }

func (m *lockingMachine) DialAgent(context.Context) (net.Conn, error) {
	hostEnd, agentEnd := net.Pipe()
	m.d.mu.Lock()
	locked, retranslated := m.locked, m.retranslated
	m.retranslated = false
	m.d.mu.Unlock()
	if locked {
		if retranslated {
			// A guest that spins on reports it again.
			f, err := os.OpenFile(m.console, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			if _, err := f.WriteString(lockupLine + "\n"); err != nil {
				return nil, err
			}
		}
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

// TestRetranslateAfterLockup: a boot whose kernel reports a soft lockup,
// on a VMM that can translate its code afresh, has that done first; a
// guest that then boots on is kept, and one that reports its lockup
// again, or whose VMM could not, is booted again as before. A KVM guest
// runs no translations to drop.
func TestRetranslateAfterLockup(t *testing.T) {
	for _, tc := range []struct {
		name           string
		lockups        int
		cures          bool
		retranslateErr error
		accel          string
		wantBoots      int
		wantRetrans    int
		wantReports    int
		wantErr        bool
		wantLog        []string
	}{
		{name: "cured", lockups: 1, cures: true, wantBoots: 1, wantRetrans: 1, wantReports: 1,
			wantLog: []string{"its code was translated afresh", "guest booted on once its code was translated afresh"}},
		{name: "spins on", lockups: 1, wantBoots: 2, wantRetrans: 1, wantReports: 2,
			wantLog: []string{"its code was translated afresh", "booting it again"}},
		{name: "retranslation fails", lockups: 1, retranslateErr: errors.New("no gdbstub"), wantBoots: 2, wantRetrans: 1, wantReports: 1,
			wantLog: []string{"its code could not be translated afresh", "no gdbstub", "booting it again"}},
		{name: "spins on twice", lockups: 2, wantBoots: 2, wantRetrans: 2, wantReports: 4, wantErr: true,
			wantLog: []string{"booting it again"}},
		{name: "kvm", lockups: 1, cures: true, accel: "kvm", wantBoots: 2, wantRetrans: 0, wantReports: 1,
			wantLog: []string{"booting it again"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &lockingDriver{t: t, lockups: tc.lockups, retranslate: true, cures: tc.cures, retranslateErr: tc.retranslateErr}
			var logBuf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logBuf, nil))
			g := Guest{Driver: d, ReadyTimeout: 30 * time.Second, Accel: tc.accel}
			machine, client, err := g.startVM(context.Background(), log, vmSpec{id: "c1", dir: t.TempDir()})
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "soft lockup - CPU#0") {
					t.Fatalf("startVM: err = %v, want the lockup", err)
				}
			} else {
				if err != nil {
					t.Fatalf("startVM: %v", err)
				}
				client.Close()
				killVM(machine)
			}
			out := logBuf.String()
			if len(d.starts) != tc.wantBoots {
				t.Errorf("%d boots, want %d:\n%s", len(d.starts), tc.wantBoots, out)
			}
			if d.killed != tc.wantBoots {
				t.Errorf("%d VMs killed, want %d", d.killed, tc.wantBoots)
			}
			if d.retranslations != tc.wantRetrans {
				t.Errorf("%d retranslations, want %d", d.retranslations, tc.wantRetrans)
			}
			if got := strings.Count(out, "guest agent did not answer"); got != tc.wantReports {
				t.Errorf("%d stall reports, want %d:\n%s", got, tc.wantReports, out)
			}
			for _, want := range tc.wantLog {
				if !strings.Contains(out, want) {
					t.Errorf("log lacks %q:\n%s", want, out)
				}
			}
			if tc.cures && tc.accel != "kvm" && strings.Contains(out, "booting it again") {
				t.Errorf("a cured boot was booted again:\n%s", out)
			}
		})
	}
}
