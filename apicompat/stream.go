package apicompat

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/jsonstream"
)

// muxWriter frames each Write as one stdcopy frame of its stream. Writers
// of the stdout and stderr streams of one connection share mu, so that
// frames never interleave.
type muxWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	stream stdcopy.StdType
}

func (m muxWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	frame := make([]byte, 8+len(p))
	frame[0] = byte(m.stream)
	binary.BigEndian.PutUint32(frame[4:8], uint32(len(p)))
	copy(frame[8:], p)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.w.Write(frame); err != nil {
		return 0, err
	}
	return len(p), nil
}

// lockedWriter serialises writes of several streams to one raw (TTY)
// connection.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// flushWriter sends every write to the client at once, as dockerd's
// ioutils.WriteFlusher does for streamed answers.
type flushWriter struct {
	w http.ResponseWriter
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	flush(f.w)
	return n, err
}

// streamNewline ends every message of a JSON progress stream, as dockerd's
// streamformatter does.
const streamNewline = "\r\n"

// jsonProgress writes one JSON message a line to a streamed response. The
// backend may call it from several goroutines, and must not call it after
// it returned; calls that come late anyway are dropped instead of writing
// to a finished response.
type jsonProgress struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	started bool
	done    bool
	err     error
}

func (j *jsonProgress) write(v any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.done {
		j.writeLocked(v)
	}
}

func (j *jsonProgress) writeLocked(v any) {
	if j.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		j.err = err
		return
	}
	j.started = true
	if _, err := j.w.Write(append(b, streamNewline...)); err != nil {
		j.err = err
		return
	}
	flush(j.w)
}

// message is the callback handed to backends.
func (j *jsonProgress) message(m jsonstream.Message) { j.write(m) }

// finish ends the stream after the backend returned err. Like dockerd, an
// error before the first message is returned, to become an ordinary HTTP
// error; after it (or always, with inBand) it is written as dockerd's
// in-stream error line, which carries the message both in errorDetail and
// in the legacy top-level "error".
func (j *jsonProgress) finish(err error, inBand bool) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.done = true
	if err == nil {
		return nil
	}
	if !j.started && !inBand {
		return err
	}
	j.writeLocked(streamError{Detail: jsonstream.Error{Message: err.Error()}, Error: err.Error()})
	return nil
}

type streamError struct {
	Detail jsonstream.Error `json:"errorDetail"`
	Error  string           `json:"error"`
}
