package proto

import (
	"bufio"
	"errors"
	"fmt"
)

// MaxLine bounds a Request or Response line. A request carries a process's
// arguments and environment, which Linux lets reach 2 MiB and more (a
// quarter of the stack limit), and a response can list a container's
// changes; both used to be cut at their reader's buffer (64 KiB in the
// agent, 32 KiB in the host), which failed a docker run with a bigger
// environment where dockerd runs it.
const MaxLine = 16 << 20

// ReadLine reads one line, newline included, of at most MaxLine bytes
// from r, whatever r's buffer size. The slice is r's own (valid until the
// next read) when the line fits in r's buffer.
func ReadLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	buf := append([]byte(nil), line...)
	for {
		line, err = r.ReadSlice('\n')
		buf = append(buf, line...)
		if len(buf) > MaxLine {
			return nil, fmt.Errorf("line longer than %d bytes", MaxLine)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return buf, err
		}
	}
}
