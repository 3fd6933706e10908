package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// QMPError is an error reply from QEMU.
type QMPError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *QMPError) Error() string { return "qmp: " + e.Class + ": " + e.Desc }

// QMPEvent is an asynchronous event QEMU sent.
type QMPEvent struct {
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

// QMP is one session on a QEMU monitor socket. It is not safe for
// concurrent use: callers run one Execute or NextEvent at a time. Events
// that arrive while Execute waits for its reply are kept for NextEvent.
type QMP struct {
	conn    net.Conn
	r       *bufio.Reader
	enc     *json.Encoder
	nextID  uint64
	pending []QMPEvent
}

// qmpMessage is any line QEMU sends: a greeting, a reply or an event.
type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP"`
	ID     *uint64         `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *QMPError       `json:"error"`
	QMPEvent
}

// DialQMP connects to the monitor at path, reads the greeting and leaves
// capabilities negotiation mode.
func DialQMP(ctx context.Context, path string) (*QMP, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	q := &QMP{conn: conn, r: bufio.NewReader(conn), enc: json.NewEncoder(conn)}
	stop := q.bindContext(ctx)
	greeting, err := q.read()
	stop()
	if err == nil && greeting.QMP == nil {
		err = errors.New("no QMP greeting")
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if err := q.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

// bindContext makes blocking I/O on the connection give up when ctx ends.
func (q *QMP) bindContext(ctx context.Context) (stop func()) {
	if dl, ok := ctx.Deadline(); ok {
		q.conn.SetDeadline(dl)
	}
	unbind := context.AfterFunc(ctx, func() { q.conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		unbind()
		q.conn.SetDeadline(time.Time{})
	}
}

func (q *QMP) read() (*qmpMessage, error) {
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var m qmpMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("decode %q: %w", line, err)
	}
	return &m, nil
}

// Execute runs command with args (nil for none) and decodes its return
// value into result (nil to discard it).
func (q *QMP) Execute(ctx context.Context, command string, args, result any) error {
	return q.execute(ctx, command, args, result, nil)
}

// ExecuteWithFile is Execute with f's descriptor passed along (SCM_RIGHTS),
// as getfd and add-fd expect: QEMU takes a duplicate, so the caller still
// owns and closes f.
func (q *QMP) ExecuteWithFile(ctx context.Context, command string, args, result any, f *os.File) error {
	return q.execute(ctx, command, args, result, f)
}

func (q *QMP) execute(ctx context.Context, command string, args, result any, f *os.File) error {
	stop := q.bindContext(ctx)
	defer stop()
	q.nextID++
	id := q.nextID
	req := struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
		ID        uint64 `json:"id"`
	}{command, args, id}
	if err := q.send(req, f); err != nil {
		return fmt.Errorf("qmp %s: send: %w", command, ctxErr(ctx, err))
	}
	for {
		m, err := q.read()
		if err != nil {
			return fmt.Errorf("qmp %s: %w", command, ctxErr(ctx, err))
		}
		if m.Event != "" {
			q.pending = append(q.pending, m.QMPEvent)
			continue
		}
		if m.ID == nil || *m.ID != id {
			continue // a reply to someone else's abandoned command
		}
		if m.Error != nil {
			return fmt.Errorf("qmp %s: %w", command, m.Error)
		}
		if result != nil {
			if err := json.Unmarshal(m.Return, result); err != nil {
				return fmt.Errorf("qmp %s: decode reply: %w", command, err)
			}
		}
		return nil
	}
}

// send writes one request line, with f's descriptor attached to it when f
// is not nil. The descriptor rides on the whole line in one sendmsg, so
// QEMU sees it with the command that names it.
func (q *QMP) send(req any, f *os.File) error {
	if f == nil {
		return q.enc.Encode(req)
	}
	uc, ok := q.conn.(*net.UnixConn)
	if !ok {
		return errors.New("passing a file needs a unix socket")
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	n, oobn, err := uc.WriteMsgUnix(b, unix.UnixRights(int(f.Fd())), nil)
	if err != nil {
		return err
	}
	if n != len(b) || oobn == 0 {
		return fmt.Errorf("short write passing a file (%d of %d bytes)", n, len(b))
	}
	return nil
}

// NextEvent returns the next event, waiting for one if none is queued.
func (q *QMP) NextEvent(ctx context.Context) (QMPEvent, error) {
	if len(q.pending) > 0 {
		ev := q.pending[0]
		q.pending = q.pending[1:]
		return ev, nil
	}
	stop := q.bindContext(ctx)
	defer stop()
	for {
		m, err := q.read()
		if err != nil {
			return QMPEvent{}, fmt.Errorf("qmp event: %w", ctxErr(ctx, err))
		}
		if m.Event != "" {
			return m.QMPEvent, nil
		}
	}
}

// Close ends the session; QEMU keeps running.
func (q *QMP) Close() error { return q.conn.Close() }

// ctxErr prefers the context's error over the deadline error it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// queryStatus is the VM's run state ("running", "paused", "inmigrate",
// ...).
func queryStatus(ctx context.Context, q *QMP) (string, error) {
	var st struct {
		Status string `json:"status"`
	}
	if err := q.Execute(ctx, "query-status", nil, &st); err != nil {
		return "", err
	}
	return st.Status, nil
}
