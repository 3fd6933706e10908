package agent

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// recorder is an attachment's stream: it keeps what it is sent and
// whether it was closed for writing.
type recorder struct {
	mu     sync.Mutex
	got    bytes.Buffer
	closed bool
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, io.ErrClosedPipe
	}
	return r.got.Write(p)
}

func (r *recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}

func (r *recorder) state() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got.String(), r.closed
}

// await polls cond; the timeout only guards against a hung test.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// attach runs sendTo in the background and returns its stream and result.
func attach(o *output, spec proto.OutputSpec) (*recorder, chan error) {
	w := &recorder{}
	done := make(chan error, 1)
	go func() { done <- o.sendTo(w, spec) }()
	return w, done
}

// pipeOutput is an output fed by a pipe the test writes to.
func pipeOutput(t *testing.T) (*output, *io.PipeWriter) {
	o := newOutput(0)
	r, w := io.Pipe()
	go o.pump(r)
	t.Cleanup(func() { w.Close() })
	return o, w
}

func TestAckedOutputIsSentAgainUntilAcknowledged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resend bool
		want   string // what the second attachment gets
	}{
		{"resend", true, "two\nthree\n"},
		{"taken", false, "three\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, pw := pipeOutput(t)
			first, firstDone := attach(o, proto.OutputSpec{Ack: true})
			io.WriteString(pw, "one\ntwo\n")
			await(t, "the first attachment's bytes", func() bool { s, _ := first.state(); return s == "one\ntwo\n" })
			if err := o.ack(first, 4); err != nil {
				t.Fatal(err)
			}
			if err := o.ack(first, 9); err == nil {
				t.Error("an acknowledgement of more than was sent was accepted")
			}
			// The host that read "two\n" dies without storing it.
			o.detach(first)
			if err := <-firstDone; err != errDetached {
				t.Fatalf("detached sender returned %v", err)
			}
			io.WriteString(pw, "three\n")
			pw.Close()

			second, secondDone := attach(o, proto.OutputSpec{Ack: true, Resend: tc.resend})
			await(t, "the second attachment to be closed for writing", func() bool { _, closed := second.state(); return closed })
			got, _ := second.state()
			if got != tc.want {
				t.Fatalf("second attachment got %q, want %q", got, tc.want)
			}
			select {
			case err := <-secondDone:
				t.Fatalf("sender ended (%v) before its bytes were acknowledged", err)
			case <-time.After(20 * time.Millisecond):
			}
			if err := o.ack(second, uint64(len(got))); err != nil {
				t.Fatal(err)
			}
			if err := <-secondDone; err != nil {
				t.Fatalf("sender after the last acknowledgement: %v", err)
			}
		})
	}
}

func TestUnackedOutputIsTakenOnWrite(t *testing.T) {
	o, pw := pipeOutput(t)
	first, firstDone := attach(o, proto.OutputSpec{})
	io.WriteString(pw, "one\n")
	await(t, "the first attachment's bytes", func() bool { s, _ := first.state(); return s == "one\n" })
	o.detach(first)
	<-firstDone
	io.WriteString(pw, "two\n")
	pw.Close()
	second, secondDone := attach(o, proto.OutputSpec{Resend: true})
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	if got, closed := second.state(); got != "two\n" || !closed {
		t.Errorf("second attachment got %q (closed %v), want \"two\\n\" and closed", got, closed)
	}
}

func TestReadAcks(t *testing.T) {
	o, pw := pipeOutput(t)
	w, done := attach(o, proto.OutputSpec{Ack: true})
	io.WriteString(pw, "abcdef")
	pw.Close()
	await(t, "the bytes", func() bool { s, _ := w.state(); return s == "abcdef" })
	acks := []byte{0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 6}
	if err := o.readAcks(bytes.NewReader(acks), w); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := o.readAcks(strings.NewReader("bad"), w); err == nil {
		t.Error("a truncated acknowledgement was accepted")
	}
}
