package qemu

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// gdbChardev and gdbFD name the chardev Retranslate attaches QEMU's
// gdbstub to, and the descriptor it is made from.
const (
	gdbChardev = "husk-gdb"
	gdbFD      = "husk-gdb"
)

// retranslateSamples is how many times Retranslate reads the vCPUs'
// registers, retranslateGap apart: a vCPU caught in a loop through an
// exception handler is seen at more than one place.
const (
	retranslateSamples = 3
	retranslateGap     = 20 * time.Millisecond
)

// codeSpan is how many bytes Retranslate writes back at each address: a
// translation that covers any of them is dropped.
const codeSpan = 16

// Retranslate has QEMU translate afresh the guest code its vCPUs are
// running, and says at how many addresses. It is for a guest whose
// kernel reports a soft lockup under TCG. QEMU 7.2 can leave a
// translation of code that a vCPU changed while another vCPU was
// translating it, and nothing drops it afterwards (bench/README.md, *What
// a guest leaves out*): a vCPU that runs it keeps running the old code
// while memory holds the new. A boot caught on a stress rig spun that
// way at a jump label its kernel had patched.
//
// QEMU drops the translations of code that is written through its
// gdbstub, as it does for a write by a vCPU, but only once the
// translation is listed, which a stale one is by then. No monitor
// command writes guest memory or drops translations, so Retranslate
// hands QEMU one end of a socket pair as a chardev, attaches the gdbstub
// to it, reads the bytes at each vCPU's instruction pointer through the
// other end and writes the same bytes back, then detaches and takes the
// stub off, which deletes the chardev. QEMU, running as an unprivileged
// user by then, needs no socket of its own for it. The gdbstub stops the
// VM while it is connected. A VM that was not running is left alone.
//
// The protocol client is hand-written: it sends five kinds of packet and
// reads their answers, which no Go library of GDB's remote protocol
// offers more simply.
func (m *Machine) Retranslate(ctx context.Context) (_ int, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("retranslate qemu %d: %w", m.pid, err)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, stallStep)
	defer cancel()
	q, err := m.QMP(ctx)
	if err != nil {
		return 0, err
	}
	defer q.Close()
	if st, err := queryStatus(ctx, q); err != nil {
		return 0, err
	} else if st != "running" {
		return 0, fmt.Errorf("the VM is %s, not running", st)
	}
	pcs, err := samplePCs(ctx, q)
	if err != nil {
		return 0, err
	}
	conn, err := attachGDB(ctx, q)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	defer func() {
		// Detached or not, the stub goes, and a VM it left stopped runs
		// again, even past ctx's end.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stallStep)
		defer cancel()
		if e := q.Execute(ctx, "human-monitor-command", map[string]string{"command-line": "gdbserver none"}, nil); e != nil && err == nil {
			err = fmt.Errorf("stop the gdbstub: %w", e)
		}
		if st, e := queryStatus(ctx, q); e == nil && st != "running" {
			if e := q.Execute(ctx, "cont", nil, nil); e != nil && err == nil {
				err = fmt.Errorf("run the VM again: %w", e)
			}
		}
	}()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	g := &gdbClient{conn: conn, rd: bufio.NewReader(conn)}
	n := 0
	for _, at := range pcs {
		if err := g.expect(fmt.Sprintf("Hg%x", at.cpu+1), "OK"); err != nil {
			return n, err
		}
		span := min(codeSpan, pageSize-int(at.pc%pageSize))
		code, err := g.send(fmt.Sprintf("m%x,%x", at.pc, span))
		if err != nil {
			return n, err
		}
		if _, err := hex.DecodeString(code); err != nil || len(code) != 2*span {
			continue // not mapped in this vCPU's tables: nothing to drop
		}
		if err := g.expect(fmt.Sprintf("M%x,%x:%s", at.pc, span, code), "OK"); err != nil {
			return n, err
		}
		n++
	}
	if err := g.expect("D", "OK"); err != nil {
		return n, err
	}
	return n, nil
}

// attachGDB gives QEMU one end of a new socket pair as the chardev
// gdbChardev, attaches its gdbstub there, and returns the other end.
func attachGDB(ctx context.Context, q *QMP) (_ net.Conn, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket pair for the gdbstub: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "gdb"), os.NewFile(uintptr(fds[1]), "gdb-qemu")
	defer ours.Close()
	defer theirs.Close()
	// Made before the stub is attached, which stops the VM.
	conn, err := net.FileConn(ours)
	if err != nil {
		return nil, fmt.Errorf("gdbstub socket: %w", err)
	}
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	if err := q.ExecuteWithFile(ctx, "getfd", map[string]string{"fdname": gdbFD}, nil, theirs); err != nil {
		return nil, fmt.Errorf("hand QEMU the gdbstub's socket: %w", err)
	}
	backend := map[string]any{"type": "socket", "data": map[string]any{
		"addr":   map[string]any{"type": "fd", "data": map[string]string{"str": gdbFD}},
		"server": false,
	}}
	if err := q.Execute(ctx, "chardev-add", map[string]any{"id": gdbChardev, "backend": backend}, nil); err != nil {
		_ = q.Execute(ctx, "closefd", map[string]string{"fdname": gdbFD}, nil)
		return nil, fmt.Errorf("add the gdbstub's chardev: %w", err)
	}
	var out string
	err = q.Execute(ctx, "human-monitor-command", map[string]string{"command-line": "gdbserver chardev:" + gdbChardev}, &out)
	if err == nil && !strings.Contains(out, "Waiting for gdb connection") {
		err = errors.New(strings.TrimSpace(out))
	}
	if err != nil {
		_ = q.Execute(ctx, "chardev-remove", map[string]string{"id": gdbChardev}, nil)
		return nil, fmt.Errorf("start the gdbstub: %w", err)
	}
	return conn, nil
}

// pageSize is the guest's page; a write back stays within the page of
// its address.
const pageSize = 4096

// cpuPC is a vCPU's instruction pointer.
type cpuPC struct {
	cpu int
	pc  uint64
}

// samplePCs reads the vCPUs' instruction pointers a few times and gives
// each address seen once, with a vCPU that was there.
func samplePCs(ctx context.Context, q *QMP) ([]cpuPC, error) {
	seen := map[uint64]bool{}
	var pcs []cpuPC
	for i := range retranslateSamples {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(retranslateGap):
			}
		}
		var regs string
		if err := q.Execute(ctx, "human-monitor-command", map[string]string{"command-line": "info registers -a"}, &regs); err != nil {
			return nil, fmt.Errorf("read the vCPUs: %w", err)
		}
		for cpu, c := range ParseCPUs(regs) {
			if c.PC != 0 && !seen[c.PC] {
				seen[c.PC] = true
				pcs = append(pcs, cpuPC{cpu, c.PC})
			}
		}
	}
	if len(pcs) == 0 {
		return nil, errors.New("no vCPU's instruction pointer in the monitor's answer")
	}
	return pcs, nil
}

// gdbClient speaks GDB's remote protocol with acknowledgements, as QEMU's
// gdbstub starts it.
type gdbClient struct {
	conn net.Conn
	rd   *bufio.Reader
}

// send sends one packet and returns its answer's payload. Stop replies
// ("T..."), which the stub also sends when a connection stops the VM, are
// passed over.
func (g *gdbClient) send(cmd string) (string, error) {
	var sum byte
	for i := 0; i < len(cmd); i++ {
		sum += cmd[i]
	}
	if _, err := fmt.Fprintf(g.conn, "$%s#%02x", cmd, sum); err != nil {
		return "", fmt.Errorf("gdbstub %.16s: %w", cmd, err)
	}
	for {
		if _, err := g.rd.ReadString('$'); err != nil {
			return "", fmt.Errorf("gdbstub %.16s: %w", cmd, err)
		}
		payload, err := g.rd.ReadString('#')
		if err != nil {
			return "", fmt.Errorf("gdbstub %.16s: %w", cmd, err)
		}
		if _, err := io.ReadFull(g.rd, make([]byte, 2)); err != nil {
			return "", fmt.Errorf("gdbstub %.16s: %w", cmd, err)
		}
		if _, err := g.conn.Write([]byte("+")); err != nil {
			return "", fmt.Errorf("gdbstub %.16s: %w", cmd, err)
		}
		payload = strings.TrimSuffix(payload, "#")
		if !strings.HasPrefix(payload, "T") {
			return payload, nil
		}
	}
}

// expect sends cmd and fails unless the answer is want.
func (g *gdbClient) expect(cmd, want string) error {
	got, err := g.send(cmd)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("gdbstub %.16s: answered %q, want %q", cmd, got, want)
	}
	return nil
}
