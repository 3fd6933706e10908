package proto

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// The agent may still be running a stale session that writes frames to the
// new host and eats part of its first preamble; the session start must get
// through both, and yamux bytes sent right after GO must reach the agent.
func TestSessionStartThroughStaleTraffic(t *testing.T) {
	hostEnd, agentEnd := net.Pipe()
	defer hostEnd.Close()
	defer agentEnd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	agentDone := serveAgent(agentEnd, func() {
		// Stale frames to the host, then a stale session that consumes
		// the first 4 KiB of the preamble before failing.
		io.WriteString(agentEnd, "\x00\x00\x00\x01garbage HUSK-READY wrong\n\x00\x00")
		io.ReadFull(agentEnd, make([]byte, 4096))
	})

	type result struct {
		r   io.Reader
		err error
	}
	hostDone := make(chan result, 1)
	go func() {
		r, err := OpenSession(ctx, hostEnd, "n1")
		hostDone <- result{r, err}
	}()
	// The agent answers once for a nonce however many hellos it reads.
	res := <-hostDone
	if res.err != nil {
		t.Fatalf("OpenSession: %v", res.err)
	}
	go io.WriteString(hostEnd, "yamux")
	if got := <-agentDone; got != "yamux" {
		t.Fatalf("agent read %q after the session start, want \"yamux\"", got)
	}
}

func TestLineScannerCutsGarbage(t *testing.T) {
	sc := &lineScanner{r: newBufReader(strings.NewReader("\x01\x02xxHUSK-GO abc\n" + strings.Repeat("z", 1000) + "HUSK-HELLO n2\n"))}
	for _, want := range [][2]string{{"HUSK-GO", "abc"}, {"HUSK-HELLO", "n2"}} {
		w, n, err := sc.next()
		if err != nil || w != want[0] || n != want[1] {
			t.Fatalf("got %q %q %v, want %q %q", w, n, err, want[0], want[1])
		}
	}
	if _, _, err := sc.next(); err != io.EOF {
		t.Fatalf("at end: %v, want EOF", err)
	}
}

// A parked agent (ParkSession) waits in the session start: the next host's
// session is the one it starts yamux for, and nothing the parking host
// sent reaches that session.
func TestParkedAgentAnswersNextHost(t *testing.T) {
	hostEnd, agentEnd := net.Pipe()
	defer hostEnd.Close()
	defer agentEnd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	agentDone := serveAgent(agentEnd, nil)

	if err := ParkSession(ctx, hostEnd, "parked"); err != nil {
		t.Fatalf("ParkSession: %v", err)
	}
	if _, err := OpenSession(ctx, hostEnd, "next"); err != nil {
		t.Fatalf("OpenSession after parking: %v", err)
	}
	go io.WriteString(hostEnd, "yamux")
	if got := <-agentDone; got != "yamux" {
		t.Fatalf("agent read %q after the next session's start, want \"yamux\"", got)
	}
}

// serveAgent runs before (if any), then the agent's session start on
// agentEnd, and sends the first 5 bytes the session then reads, or the
// error that stopped it.
func serveAgent(agentEnd net.Conn, before func()) <-chan string {
	done := make(chan string, 1)
	go func() {
		if before != nil {
			before()
		}
		rest, err := AcceptSession(agentEnd)
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		b := make([]byte, 5)
		if _, err := io.ReadFull(rest, b); err != nil {
			done <- "error: " + err.Error()
			return
		}
		done <- string(b)
	}()
	return done
}
