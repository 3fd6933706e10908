package proto

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Session start. A byte stream such as a virtio-serial port survives the
// host side going away, and Linux may never report the gap to the guest
// when the host reconnects quickly, so the agent can still be running the
// previous yamux session when the new host starts talking. Before yamux,
// therefore:
//
//  1. The host writes a preamble: FillerLen newline bytes, then
//     "HUSK-HELLO <nonce>\n". The filler is not a valid yamux header, so a
//     stale session in the agent fails on it (having buffered at most a few
//     KiB) and the agent goes back to looking for a hello. The host repeats
//     the preamble every HelloInterval until answered.
//  2. The agent answers the first hello of a nonce with "HUSK-READY <nonce>\n"
//     and then ignores everything up to "HUSK-GO <nonce>\n".
//  3. The host skips anything before the matching READY (frames of the
//     agent's stale session), stops repeating, writes "HUSK-GO <nonce>\n"
//     and starts yamux; the agent starts yamux after the GO line.
//
// A host may stop after READY (ParkSession) and leave the agent waiting in
// step 2, where the next host's hello is answered at once. A template is
// snapshotted that way: a stale yamux session would otherwise be restored
// with it, and every restore would first have to fail and unwind it.
const (
	FillerLen     = 8 << 10
	HelloInterval = time.Second
)

const (
	helloWord = "HUSK-HELLO"
	readyWord = "HUSK-READY"
	goWord    = "HUSK-GO"
	maxLine   = 256
)

func newBufReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 4096) }

// lineScanner yields control lines from a stream that may carry binary
// garbage: each newline-terminated line is cut to its last "HUSK-".
type lineScanner struct{ r *bufio.Reader }

func (s *lineScanner) next() (word, nonce string, err error) {
	var line []byte
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			return "", "", err
		}
		if b != '\n' {
			line = append(line, b)
			if len(line) > maxLine {
				line = append(line[:0], line[len(line)-maxLine/2:]...)
			}
			continue
		}
		i := bytes.LastIndex(line, []byte("HUSK-"))
		if i < 0 {
			line = line[:0]
			continue
		}
		w, n, ok := bytes.Cut(line[i:], []byte(" "))
		if ok && len(n) > 0 {
			return string(w), string(n), nil
		}
		line = line[:0]
	}
}

// rest is what the scanner buffered beyond the last line, followed by the
// stream.
func (s *lineScanner) rest(r io.Reader) io.Reader {
	n := s.r.Buffered()
	if n == 0 {
		return r
	}
	b, _ := s.r.Peek(n)
	return io.MultiReader(bytes.NewReader(append([]byte(nil), b...)), r)
}

// AcceptSession runs the agent's side of the session start on rw and
// returns the reader yamux must use (it holds bytes read past the GO line).
func AcceptSession(rw io.ReadWriter) (io.Reader, error) {
	sc := &lineScanner{r: newBufReader(rw)}
	var nonce string
	for {
		word, n, err := sc.next()
		if err != nil {
			return nil, fmt.Errorf("wait for host hello: %w", err)
		}
		switch {
		case word == helloWord && n != nonce:
			nonce = n
			if _, err := io.WriteString(rw, readyWord+" "+nonce+"\n"); err != nil {
				return nil, fmt.Errorf("answer host hello: %w", err)
			}
		case word == goWord && n == nonce:
			return sc.rest(rw), nil
		}
	}
}

// OpenSession runs the host's side of the session start on rw with a fresh
// nonce and returns the reader yamux must use. It returns when the agent
// answered, ctx ended, or rw failed; on ctx's end the caller must close rw
// to stop the pending I/O.
func OpenSession(ctx context.Context, rw io.ReadWriter, nonce string) (io.Reader, error) {
	rest, err := hello(ctx, rw, nonce)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(rw, goWord+" "+nonce+"\n"); err != nil {
		return nil, fmt.Errorf("send go to agent: %w", err)
	}
	return rest, nil
}

// ParkSession runs the host's side of the session start up to the agent's
// READY and stops there: the agent is then waiting for a GO that never
// comes, its previous session gone, and answers the next hello at once. It
// has the same cancellation contract as OpenSession.
func ParkSession(ctx context.Context, rw io.ReadWriter, nonce string) error {
	_, err := hello(ctx, rw, nonce)
	return err
}

// hello repeats the preamble until the agent's READY for nonce and returns
// the reader that holds what followed it.
func hello(ctx context.Context, rw io.ReadWriter, nonce string) (io.Reader, error) {
	preamble := append(bytes.Repeat([]byte{'\n'}, FillerLen), helloWord+" "+nonce+"\n"...)
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		t := time.NewTicker(HelloInterval)
		defer t.Stop()
		for {
			if _, err := rw.Write(preamble); err != nil {
				writerDone <- err
				return
			}
			select {
			case <-stop:
				writerDone <- nil
				return
			case <-ctx.Done():
				writerDone <- ctx.Err()
				return
			case <-t.C:
			}
		}
	}()

	type answer struct {
		rest io.Reader
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		sc := &lineScanner{r: newBufReader(rw)}
		for {
			word, n, err := sc.next()
			if err != nil {
				answered <- answer{err: err}
				return
			}
			if word == readyWord && n == nonce {
				answered <- answer{rest: sc.rest(rw)}
				return
			}
		}
	}()

	var a answer
	select {
	case a = <-answered:
	case err := <-writerDone:
		if err == nil {
			err = errors.New("hello writer stopped")
		}
		return nil, fmt.Errorf("send hello to agent: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	close(stop)
	if a.err != nil {
		<-writerDone
		return nil, fmt.Errorf("wait for agent ready: %w", a.err)
	}
	// No hello may follow the GO line.
	if err := <-writerDone; err != nil {
		return nil, fmt.Errorf("send hello to agent: %w", err)
	}
	return a.rest, nil
}
