package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/husk-vm/husk/shim/proto"
)

// defaultOutputLimit bounds what one output stream may hold while no host
// stream takes it. Past it the pump stops reading the pipe, so the process
// blocks on write instead of the guest dropping or growing without bound.
const defaultOutputLimit = 8 << 20

// errDetached is returned to a sender whose attachment was taken over.
var errDetached = errors.New("output stream taken over by a newer attachment")

// output holds one stdout or stderr stream of a process between the pipe and
// whichever host stream is attached. Bytes leave the buffer only once a host
// stream has accepted them (or, for an acknowledging attachment, once the
// host says it has stored them), so a session or a host that dies loses
// nothing that it had not kept.
type output struct {
	limit int

	mu   sync.Mutex
	cond *sync.Cond
	// buf holds the bytes not yet taken: its first sent bytes were written
	// (or are being written) to an acknowledging attachment that has not
	// acknowledged them yet.
	buf  []byte
	sent int
	eof  bool // the pipe is drained and closed
	// sender is the attachment now allowed to send; an older one stops.
	sender  uint64
	nextGen uint64
	// acking and acked describe the current attachment: whether it
	// acknowledges, and how many bytes it has acknowledged in all.
	acking  bool
	acked   uint64
	writing bool // a sender is in Write with bytes from buf
	// closers close the attachments still running so a newer one can take
	// over even if the old one is stuck writing to a dead session.
	closers map[uint64]io.Closer
}

func newOutput(limit int) *output {
	if limit <= 0 {
		limit = defaultOutputLimit
	}
	o := &output{limit: limit, closers: map[uint64]io.Closer{}}
	o.cond = sync.NewCond(&o.mu)
	return o
}

// pump copies r into the buffer until EOF or a read error, then marks the
// stream finished and closes r.
func (o *output) pump(r io.ReadCloser) {
	defer r.Close()
	chunk := make([]byte, 32<<10)
	for {
		o.mu.Lock()
		for len(o.buf) >= o.limit {
			o.cond.Wait()
		}
		room := o.limit - len(o.buf)
		o.mu.Unlock()

		n, err := r.Read(chunk[:min(room, len(chunk))])
		o.mu.Lock()
		o.buf = append(o.buf, chunk[:n]...)
		if err != nil {
			o.eof = true
		}
		o.cond.Broadcast()
		o.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// sendTo streams the buffer into w until the pipe is drained (returns nil)
// or w fails or is taken over by a later call (returns the error). Unsent
// bytes stay for the next attachment, as do sent ones that an acknowledging
// attachment did not acknowledge. w is closed by sendTo in every case
// except when it is taken over, where the newer attachment closes it; an
// acknowledging w is closed for writing once everything is sent, and
// sendTo returns once everything is acknowledged or w is detached.
func (o *output) sendTo(w io.WriteCloser, spec proto.OutputSpec) error {
	o.mu.Lock()
	o.nextGen++
	gen := o.nextGen
	// Make older senders give up: close their writers and wait until they
	// have let go, so two senders never pick the same bytes.
	for g, c := range o.closers {
		c.Close()
		delete(o.closers, g)
	}
	o.sender = gen
	o.closers[gen] = w
	o.cond.Broadcast()
	for o.writing {
		o.cond.Wait()
	}
	if !spec.Resend {
		o.take(o.sent)
	}
	o.sent, o.acking, o.acked = 0, spec.Ack, 0
	defer func() {
		delete(o.closers, gen)
		o.cond.Broadcast()
		o.mu.Unlock()
	}()

	closed := false
	for {
		for o.sender == gen && (o.writing || o.sent == len(o.buf) && !o.eof || closed && len(o.buf) > 0) {
			o.cond.Wait()
		}
		if o.sender != gen {
			return errDetached
		}
		if o.sent == len(o.buf) && o.eof {
			if closed {
				return nil // all acknowledged
			}
			closed = true
			if err := w.Close(); err != nil || len(o.buf) == 0 {
				return err
			}
			continue
		}
		// Write outside the lock; only this sender may take bytes from buf,
		// so the slice stays valid while the pump appends. The bytes count
		// as sent before the write returns: the host may acknowledge them
		// before it does.
		end := min(len(o.buf), o.sent+32<<10)
		pending := o.buf[o.sent:end:end]
		o.writing = true
		if o.acking {
			o.sent += len(pending)
		}
		o.mu.Unlock()
		n, err := w.Write(pending)
		o.mu.Lock()
		o.writing = false
		if o.acking {
			o.sent -= len(pending) - n
		} else {
			o.take(n)
		}
		o.cond.Broadcast()
		if err != nil {
			if o.sender == gen {
				w.Close()
			}
			return err
		}
	}
}

// take drops n bytes from the front of buf: the host has them. Callers
// hold o.mu.
func (o *output) take(n int) {
	o.buf = o.buf[n:]
	if len(o.buf) == 0 {
		o.buf = nil
	}
}

// ack records that the attachment writing to w has stored total bytes in
// all. An acknowledgement of more than was sent is a protocol error.
func (o *output) ack(w io.WriteCloser, total uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.closers[o.sender]; !ok || c != w || !o.acking {
		return nil // taken over: the newer attachment decides
	}
	if total < o.acked || total-o.acked > uint64(o.sent) {
		return fmt.Errorf("acknowledgement of %d bytes, but %d were acknowledged and %d more sent", total, o.acked, o.sent)
	}
	n := int(total - o.acked)
	o.take(n)
	o.sent -= n
	o.acked = total
	o.cond.Broadcast()
	return nil
}

// detach ends the attachment writing to w, if it is still the current one:
// its session is gone. Without this a sender waiting for output that never
// comes (an idle stderr) would hold its session open forever.
func (o *output) detach(w io.WriteCloser) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for g, c := range o.closers {
		if c == w && o.sender == g {
			o.sender = 0
			o.cond.Broadcast()
		}
	}
}

// readAcks applies the acknowledgements an attachment writes on r until r
// ends or carries something else.
func (o *output) readAcks(r io.Reader, w io.WriteCloser) error {
	var b [proto.AckSize]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := o.ack(w, binary.BigEndian.Uint64(b[:])); err != nil {
			return err
		}
	}
}
