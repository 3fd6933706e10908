package qemu

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/runtime/vmm/vmmproc"
)

// stallStep bounds DescribeStall's monitor session, some fifty requests
// that take milliseconds each: a QEMU whose main loop is blocked (a vCPU
// holding its lock while it waits on a vhost-user back end, say) never
// answers, and that is itself the finding.
const stallStep = 3 * time.Second

// DescribeStall says what QEMU can tell of a guest that did not become
// ready: its run state, where each vCPU is (HMP's "info registers", which
// QMP has no command for), and each virtqueue's counts of buffers posted
// and used (found by QEMU 7.2's x-query-virtio commands, which are
// unstable by name and so asked for only here). QEMU's threads are read
// from /proc in any case: a monitor that does not answer is stuck behind
// one of them.
func (m *Machine) DescribeStall(ctx context.Context) vmm.Stall {
	var s vmm.Stall
	if threads, err := vmmproc.Threads(m.pid); err != nil {
		s.Errs = append(s.Errs, err)
	} else {
		s.Threads = threads
	}
	qctx, cancel := context.WithTimeout(ctx, stallStep)
	defer cancel()
	q, err := m.QMP(qctx)
	if err != nil {
		s.Errs = append(s.Errs, fmt.Errorf("monitor: %w", err))
		return s
	}
	defer q.Close()
	if s.State, err = queryStatus(qctx, q); err != nil {
		s.Errs = append(s.Errs, err)
		return s
	}
	var regs string
	if err := q.Execute(qctx, "human-monitor-command", map[string]string{"command-line": "info registers -a"}, &regs); err != nil {
		s.Errs = append(s.Errs, err)
	} else {
		s.CPUs = ParseCPUs(regs)
	}
	for i := range s.CPUs {
		code, err := guestCode(qctx, q, i, s.CPUs[i].PC)
		if err != nil {
			s.Errs = append(s.Errs, fmt.Errorf("code of vCPU %d: %w", i, err))
			continue
		}
		s.CPUs[i].Code = code
	}
	queues, err := queueCounts(qctx, q)
	if err != nil {
		s.Errs = append(s.Errs, err)
	}
	s.Queues = queues
	return s
}

var (
	cpuHeader = regexp.MustCompile(`(?m)^CPU#\d+`)
	// EIP for a vCPU still in 32-bit mode, early in a boot.
	ripHLT = regexp.MustCompile(`\b[RE]IP=([0-9a-f]+)\b[^\n]*\bHLT=([01])`)
)

// ParseCPUs reads each vCPU's instruction pointer and HLT out of HMP's
// "info registers -a", whose sections each begin "CPU#n".
func ParseCPUs(regs string) []vmm.StalledCPU {
	starts := cpuHeader.FindAllStringIndex(regs, -1)
	var cpus []vmm.StalledCPU
	for i, st := range starts {
		end := len(regs)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		m := ripHLT.FindStringSubmatch(regs[st[0]:end])
		if m == nil {
			continue
		}
		pc, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil {
			continue
		}
		cpus = append(cpus, vmm.StalledCPU{PC: pc, Halted: m[2] == "1"})
	}
	return cpus
}

// virtqueueStatus is the part of x-query-virtio-queue-status that
// places a queue's rings in guest memory.
type virtqueueStatus struct {
	Name  string `json:"name"`
	Index int    `json:"queue-index"`
	Avail uint64 `json:"vring-avail"`
	Used  uint64 `json:"vring-used"`
	InUse int    `json:"inuse"`
}

// maxQueues bounds the queues asked for per device: the agent's
// virtio-serial device has six (in and out for each of its two ports and
// its control channel), SCSI four, a NIC three.
const maxQueues = 8

// queueCounts reads each virtqueue's two counters from the guest's rings:
// how many buffers the guest has posted (the available ring's idx) and how
// many the device has given back (the used ring's). Read from guest
// memory, they hold for vhost-user devices too, whose back ends QEMU does
// not track. A queue the guest fills ahead (a NIC's or a port's receive
// queue) normally has posted ahead of used; one it sends on should not.
func queueCounts(ctx context.Context, q *QMP) ([]string, error) {
	var devices []struct {
		Path string `json:"path"`
		Name string `json:"name"`
	}
	if err := q.Execute(ctx, "x-query-virtio", nil, &devices); err != nil {
		return nil, err
	}
	var out []string
	for _, d := range devices {
		for i := range maxQueues {
			var vq virtqueueStatus
			err := q.Execute(ctx, "x-query-virtio-queue-status", map[string]any{"path": d.Path, "queue": i}, &vq)
			if qe := (*QMPError)(nil); errors.As(err, &qe) {
				break // past the device's last queue
			}
			if err != nil {
				return out, err
			}
			if vq.Avail == 0 {
				continue // not set up by the guest
			}
			posted, err := guestU16(ctx, q, vq.Avail+2)
			if err != nil {
				return out, err
			}
			used, err := guestU16(ctx, q, vq.Used+2)
			if err != nil {
				return out, err
			}
			out = append(out, fmt.Sprintf("%s queue %d: posted %d, used %d, in QEMU %d", d.Name, vq.Index, posted, used, vq.InUse))
		}
	}
	return out, nil
}

// codeLen is how many bytes of code at each vCPU's PC are read: the
// longest common instructions (a 5-byte jump or call, the NOP a patched
// one becomes) and the start of the next.
const codeLen = 8

// guestCode reads codeLen bytes at a vCPU's virtual address pc, through
// that vCPU's page tables (HMP's x on that vCPU).
func guestCode(ctx context.Context, q *QMP, cpu int, pc uint64) ([]byte, error) {
	return examineBytes(ctx, q, cpu, fmt.Sprintf("x /%dxb %#x", codeLen, pc), codeLen)
}

// examineBytes is examine for a command that prints n bytes (format xb).
func examineBytes(ctx context.Context, q *QMP, cpu int, command string, n int) ([]byte, error) {
	vals, err := examine(ctx, q, cpu, command, n)
	if err != nil {
		return nil, err
	}
	b := make([]byte, len(vals))
	for i, v := range vals {
		b[i] = byte(v)
	}
	return b, nil
}

// guestU16 reads a 16-bit word of guest-physical memory (HMP's xp).
func guestU16(ctx context.Context, q *QMP, addr uint64) (uint16, error) {
	vals, err := examine(ctx, q, 0, fmt.Sprintf("xp /1hx %#x", addr), 1)
	if err != nil {
		return 0, err
	}
	return uint16(vals[0]), nil
}

// hmpValue is one value HMP's x and xp print in hex ("ffffffff814a4815:
// 0xe9 0x99 ..."): the addresses that begin their lines carry no 0x, so
// only the values match.
var hmpValue = regexp.MustCompile(`\b0x([0-9a-f]+)\b`)

// examine runs HMP's x or xp (command, with its format and address) on
// vCPU cpu, whose page tables x reads through, and returns the n values
// it prints.
func examine(ctx context.Context, q *QMP, cpu int, command string, n int) ([]uint64, error) {
	var out string
	if err := q.Execute(ctx, "human-monitor-command", map[string]any{"command-line": command, "cpu-index": cpu}, &out); err != nil {
		return nil, err
	}
	var vals []uint64
	for _, m := range hmpValue.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", command, err)
		}
		vals = append(vals, v)
	}
	if len(vals) != n {
		return nil, fmt.Errorf("%s: %d values, want %d: %q", command, len(vals), n, out)
	}
	return vals, nil
}
