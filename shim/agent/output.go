package agent

import (
	"errors"
	"io"
	"sync"
)

// defaultOutputLimit bounds what one output stream may hold while no host
// stream takes it. Past it the pump stops reading the pipe, so the process
// blocks on write instead of the guest dropping or growing without bound.
const defaultOutputLimit = 8 << 20

// errDetached is returned to a sender whose attachment was taken over.
var errDetached = errors.New("output stream taken over by a newer attachment")

// output holds one stdout or stderr stream of a process between the pipe and
// whichever host stream is attached. Bytes leave the buffer only once a host
// stream has accepted them, so a session that dies mid-write loses nothing
// that it had not taken.
type output struct {
	limit int

	mu   sync.Mutex
	cond *sync.Cond
	buf  []byte
	eof  bool // the pipe is drained and closed
	// sender is the attachment now allowed to send; an older one stops.
	sender  uint64
	nextGen uint64
	writing bool // a sender is in Write with bytes from the front
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
// bytes stay for the next attachment. w is closed by sendTo in every case
// except when it is taken over, where the newer attachment closes it.
func (o *output) sendTo(w io.WriteCloser) error {
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
	defer func() {
		delete(o.closers, gen)
		o.cond.Broadcast()
		o.mu.Unlock()
	}()

	for {
		for (len(o.buf) == 0 && !o.eof || o.writing) && o.sender == gen {
			o.cond.Wait()
		}
		if o.sender != gen {
			return errDetached
		}
		if len(o.buf) == 0 && o.eof {
			return w.Close()
		}
		// Write outside the lock; only this sender may take bytes from the
		// front, so the slice stays valid while the pump appends.
		pending := o.buf[:min(len(o.buf), 32<<10):min(len(o.buf), 32<<10)]
		o.writing = true
		o.mu.Unlock()
		n, err := w.Write(pending)
		o.mu.Lock()
		o.writing = false
		o.buf = o.buf[n:]
		if len(o.buf) == 0 {
			o.buf = nil
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

// done reports whether the pipe was drained and everything was sent.
func (o *output) done() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.eof && len(o.buf) == 0
}
