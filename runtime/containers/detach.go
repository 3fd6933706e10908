package containers

import (
	"bytes"
	"errors"
	"io"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/shim/proto"
)

// DefaultDetachKeys is dockerd's default detach sequence, ctrl-p ctrl-q.
const DefaultDetachKeys = "ctrl-p,ctrl-q"

// errDetached ends a stdin copy when the client typed its detach sequence.
var errDetached = errors.New("detached by the client's key sequence")

// ParseDetachKeys reads the detach-key syntax of docker's --detach-keys:
// comma-separated keys, each a single character or "ctrl-" followed by a
// letter or one of @[\]^_. "" means the default. The error is dockerd's.
func ParseDetachKeys(s string) ([]byte, error) {
	if s == "" {
		s = DefaultDetachKeys
	}
	var out []byte
	for _, key := range strings.Split(s, ",") {
		switch {
		case len(key) == 1:
			out = append(out, key[0])
		case strings.HasPrefix(key, "ctrl-") && len(key) == 6:
			c := key[5]
			switch {
			case c >= 'a' && c <= 'z':
				out = append(out, c-'a'+1)
			case c == '@':
				out = append(out, 0)
			case c >= '[' && c <= '_':
				out = append(out, c-'['+27)
			default:
				return nil, invalidDetachKeys(s)
			}
		default:
			return nil, invalidDetachKeys(s)
		}
	}
	return out, nil
}

func invalidDetachKeys(s string) error {
	return errdefs.ErrInvalidArgument.WithMessage("Invalid detach keys (" + s + ") provided")
}

// escapeProxy passes input through until it meets keys, then fails with
// errDetached. Bytes that may begin the sequence are held back until it is
// clear whether they do, so a completed sequence never reaches the process
// and an interrupted one reaches it whole.
type escapeProxy struct {
	r       io.Reader
	keys    []byte
	held    []byte // a prefix of keys read but not passed on
	pending []byte // bytes cleared for the caller
	err     error  // what the caller gets once pending is empty
	buf     []byte
}

func newEscapeProxy(r io.Reader, keys []byte) *escapeProxy {
	return &escapeProxy{r: r, keys: keys, buf: make([]byte, 32<<10)}
}

func (e *escapeProxy) Read(p []byte) (int, error) {
	for len(e.pending) == 0 && e.err == nil {
		n, err := e.r.Read(e.buf)
		for _, b := range e.buf[:n] {
			e.held = append(e.held, b)
			if bytes.Equal(e.held, e.keys) {
				// What follows the sequence is dropped, as dockerd does.
				e.held = nil
				e.err = errDetached
				break
			}
			// On a mismatch the held bytes go through, except a tail that
			// may still begin the sequence (ctrl-p ctrl-p ctrl-q detaches).
			for len(e.held) > 0 && !bytes.HasPrefix(e.keys, e.held) {
				e.pending = append(e.pending, e.held[0])
				e.held = e.held[1:]
			}
		}
		if err != nil && e.err == nil {
			// A sequence cut short by the end of input is input.
			e.pending = append(e.pending, e.held...)
			e.held = nil
			e.err = err
		}
	}
	if len(e.pending) == 0 {
		return 0, e.err
	}
	n := copy(p, e.pending)
	e.pending = e.pending[n:]
	return n, nil
}

// consoleSize is a terminal's initial size from the API's [height, width],
// nil when there is no terminal or no size.
func consoleSize(tty bool, hw [2]uint) *proto.WindowSize {
	if !tty || hw[0] == 0 || hw[1] == 0 {
		return nil
	}
	return &proto.WindowSize{Rows: uint16(hw[0]), Cols: uint16(hw[1])}
}
