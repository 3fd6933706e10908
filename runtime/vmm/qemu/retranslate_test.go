package qemu

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRetranslate leaves a real guest's vCPUs running code that its
// memory no longer holds, as the stale translation in a boot that hung
// did, and has Retranslate bring them back to what memory holds. The
// guest idles in the kernel, where its vCPUs resume after a hlt: the
// test writes a jump to itself there through a gdbstub of its own, so
// that QEMU drops its translation and the next vCPU to wake spins in
// the jump; then it writes the old bytes back through /proc, which QEMU
// does not see.
func TestRetranslate(t *testing.T) {
	env := needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := vmConfig(t, env, "retranslate")
	cfg.CPUs = 2
	m := startCounting(t, ctx, New(Options{Binary: env.qemu}), cfg).(*Machine)
	// QEMU serves one monitor client at a time; Retranslate is another.
	q, err := m.QMP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { q.Close() }()

	var cpu int
	var pc uint64
	waitCPUs(t, ctx, q, "a vCPU halted in the kernel", func(i int, c cpuState) bool {
		cpu, pc = i, c.pc
		return c.halted && c.pc >= 0xffffffff80000000
	})
	hva := hostAddress(t, ctx, q, cpu, pc)
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", m.pid), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	old := make([]byte, 2)
	if _, err := mem.ReadAt(old, hva); err != nil {
		t.Fatal(err)
	}
	writeThroughGDB(t, ctx, q, pc, []byte{0xeb, 0xfe}) // jmp .
	spinning := func(_ int, c cpuState) bool { return !c.halted && c.pc == pc }
	waitCPUs(t, ctx, q, "a vCPU spinning in the jump", spinning)
	if _, err := mem.WriteAt(old, hva); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	waitCPUs(t, ctx, q, "a vCPU still spinning with the old bytes in memory", spinning)

	q.Close()
	n, err := m.Retranslate(ctx)
	if err != nil {
		t.Fatalf("Retranslate: %v", err)
	}
	if q, err = m.QMP(ctx); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Errorf("Retranslate wrote back at no address")
	}
	waitCPUs(t, ctx, q, "a vCPU halted again", func(_ int, c cpuState) bool { return c.halted })
	if r := say(t, ctx, m, "incr"); r != "count 3" {
		t.Errorf("after Retranslate the guest counted %q, want count 3", r)
	}
	// Each retranslation brings its own chardev, which QEMU deletes
	// after it, so there can be another.
	q.Close()
	if _, err := m.Retranslate(ctx); err != nil {
		t.Errorf("a second Retranslate: %v", err)
	}
	if r := say(t, ctx, m, "incr"); r != "count 4" {
		t.Errorf("after a second Retranslate the guest counted %q, want count 4", r)
	}
	if q, err = m.QMP(ctx); err != nil {
		t.Fatal(err)
	}
	var chardevs []struct {
		Label string `json:"label"`
	}
	if err := q.Execute(ctx, "query-chardev", nil, &chardevs); err != nil {
		t.Fatal(err)
	}
	for _, c := range chardevs {
		if c.Label == gdbChardev {
			t.Errorf("chardev %s left after Retranslate", gdbChardev)
		}
	}
	if st, err := queryStatus(ctx, q); err != nil || st != "running" {
		t.Errorf("after Retranslate the VM is %q (%v), want running", st, err)
	}
}

type cpuState struct {
	pc     uint64
	halted bool
}

// waitCPUs reads the vCPUs until one of them matches.
func waitCPUs(t *testing.T, ctx context.Context, q *QMP, what string, match func(int, cpuState) bool) {
	t.Helper()
	var regs string
	for ctx.Err() == nil {
		if err := q.Execute(ctx, "human-monitor-command", map[string]string{"command-line": "info registers -a"}, &regs); err != nil {
			t.Fatal(err)
		}
		for i, c := range ParseCPUs(regs) {
			if match(i, cpuState{c.PC, c.Halted}) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s: %v\n%s", what, ctx.Err(), regs)
}

var hmpHostAddress = regexp.MustCompile(`is (0x[0-9a-f]+)`)

// hostAddress is where QEMU maps the guest memory at vCPU cpu's virtual
// address addr.
func hostAddress(t *testing.T, ctx context.Context, q *QMP, cpu int, addr uint64) int64 {
	t.Helper()
	var out string
	if err := q.Execute(ctx, "human-monitor-command", map[string]any{"command-line": fmt.Sprintf("gva2gpa %#x", addr), "cpu-index": cpu}, &out); err != nil {
		t.Fatal(err)
	}
	gpa := strings.TrimPrefix(strings.TrimSpace(out), "gpa: ")
	if err := q.Execute(ctx, "human-monitor-command", map[string]any{"command-line": "gpa2hva " + gpa}, &out); err != nil {
		t.Fatal(err)
	}
	m := hmpHostAddress.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("gpa2hva %s: %q", gpa, out)
	}
	hva, err := strconv.ParseInt(m[1], 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	return hva
}

// writeThroughGDB writes b at the guest's virtual address addr through a
// gdbstub on a socket of the test's, in a directory QEMU, run as nobody,
// can write; then takes the stub off it again.
func writeThroughGDB(t *testing.T, ctx context.Context, q *QMP, addr uint64, b []byte) {
	t.Helper()
	dir, err := os.MkdirTemp("", "husk-gdb-") // t.TempDir's parent is closed to others
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "gdb.sock")
	hmp := func(cmd string) {
		if err := q.Execute(ctx, "human-monitor-command", map[string]string{"command-line": cmd}, nil); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
	}
	hmp("gdbserver unix:" + sock + ",server=on,wait=off")
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	g := &gdbClient{conn: conn, rd: bufio.NewReader(conn)}
	if err := g.expect(fmt.Sprintf("M%x,%x:%x", addr, len(b), b), "OK"); err != nil {
		t.Fatal(err)
	}
	if err := g.expect("D", "OK"); err != nil {
		t.Fatal(err)
	}
	hmp("gdbserver none")
}
