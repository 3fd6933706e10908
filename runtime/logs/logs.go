// Package logs stores a container's output on the host in dockerd's
// json-file format (one {"log","stream","time"} object per line), so logs
// outlive the VM and survive a daemon restart, and serves them back with
// tail, since/until and follow.
package logs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Entry is one line (or a final partial line) of output.
type Entry struct {
	Stream string    `json:"stream"`
	Time   time.Time `json:"time"`
	Data   []byte    `json:"-"`
}

// record is the on-disk shape, as dockerd's json-file driver writes it.
type record struct {
	Log    string    `json:"log"`
	Stream string    `json:"stream"`
	Time   time.Time `json:"time"`
}

// File is the log of one container. Writers append; readers read stored
// entries and may follow new ones.
type File struct {
	path string

	mu      sync.Mutex
	f       *os.File
	partial map[string][]byte // per stream, bytes not yet ended by '\n'
	subs    map[chan Entry]struct{}
	closed  bool // no writer: followers end once they catch up
	// runOver is set from a run's EndRun to the next BeginRun: a follow
	// that starts then has nothing more to wait for.
	runOver bool
	now     func() time.Time
	opts    Options
	size    int64 // of the live file; -1 until known (rotate.go)
}

// Open opens (creating if needed) the log at path for appending.
func Open(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	return &File{path: path, f: f, partial: map[string][]byte{}, subs: map[chan Entry]struct{}{}, now: time.Now, size: -1}, nil
}

// Path is where the log lives.
func (l *File) Path() string { return l.path }

// Writer returns an io.Writer that logs what it is given as stream.
func (l *File) Writer(stream string) io.Writer { return streamWriter{l: l, stream: stream} }

type streamWriter struct {
	l      *File
	stream string
}

func (w streamWriter) Write(p []byte) (int, error) {
	return len(p), w.l.write(w.stream, p)
}

func (l *File) write(stream string, p []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := append(l.partial[stream], p...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		if err := l.emit(stream, buf[:i+1]); err != nil {
			return err
		}
		buf = buf[i+1:]
	}
	// Keep the partial line; a long one is flushed as dockerd does (16 KiB).
	if len(buf) >= 16*1024 {
		if err := l.emit(stream, buf); err != nil {
			return err
		}
		buf = nil
	}
	l.partial[stream] = append([]byte(nil), buf...)
	return nil
}

// Pending is how many bytes of stream are held as a partial line, not yet
// in the file: what a writer has stored is what it wrote less these.
func (l *File) Pending(stream string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.partial[stream])
}

// emit writes one entry and hands it to followers. Callers hold l.mu.
func (l *File) emit(stream string, data []byte) error {
	e := Entry{Stream: stream, Time: l.now().UTC(), Data: append([]byte(nil), data...)}
	line, err := json.Marshal(record{Log: string(e.Data), Stream: stream, Time: e.Time})
	if err != nil {
		return fmt.Errorf("encode log entry: %w", err)
	}
	if !l.opts.Discard {
		if err := l.rotateIfFull(); err != nil {
			return err
		}
	}
	if l.f != nil && !l.opts.Discard {
		n, err := l.f.Write(append(line, '\n'))
		if l.size >= 0 {
			l.size += int64(n)
		}
		if err != nil {
			return fmt.Errorf("write log %s: %w", l.path, err)
		}
	}
	for ch := range l.subs {
		select {
		case ch <- e:
		default:
			// A follower that cannot keep up loses the live entry rather than
			// stalling the container's output.
		}
	}
	return nil
}

// Flush writes out partial lines: the process ended without a newline.
func (l *File) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for stream, buf := range l.partial {
		if len(buf) > 0 {
			errs = append(errs, l.emit(stream, buf))
		}
		delete(l.partial, stream)
	}
	return errors.Join(errs...)
}

// BeginRun readies the log for a run whose output followers may wait on.
func (l *File) BeginRun() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runOver = false
}

// EndRun ends every follower: the run's output is complete. The container
// calls it once its exit is recorded, as dockerd ends a docker logs -f
// only once the container has stopped, so that a docker rm right after
// one does not find it running.
func (l *File) EndRun() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runOver = true
	for ch := range l.subs {
		close(ch)
		delete(l.subs, ch)
	}
}

// Close flushes, ends followers and closes the file.
func (l *File) Close() error {
	err := l.Flush()
	l.EndRun()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.f != nil {
		err = errors.Join(err, l.f.Close())
		l.f = nil
	}
	return err
}

// ReadOptions selects entries.
type ReadOptions struct {
	Stdout, Stderr bool
	Since, Until   time.Time
	// Tail is the number of entries from the end; negative means all.
	Tail int
	// Follow keeps the channel open for new entries until the current run's
	// output ends (Flush) or ctx is done.
	Follow bool
	// Running tells whether more output may come; a follow of a stopped
	// container ends after the stored entries, as dockerd's does.
	Running bool
}

// Read streams the stored entries, then live ones when following.
func (l *File) Read(ctx context.Context, opts ReadOptions) (<-chan Entry, error) {
	var sub chan Entry
	l.mu.Lock()
	if opts.Follow && opts.Running && !l.closed && !l.runOver {
		sub = make(chan Entry, 1024)
		l.subs[sub] = struct{}{}
	}
	// Read the file while holding the lock so no entry is both stored and
	// delivered live, or neither.
	stored, err := l.readStored()
	l.mu.Unlock()
	if err != nil {
		if sub != nil {
			l.unsubscribe(sub)
		}
		return nil, err
	}
	want := func(e Entry) bool {
		if e.Stream == "stdout" && !opts.Stdout || e.Stream == "stderr" && !opts.Stderr {
			return false
		}
		if !opts.Since.IsZero() && e.Time.Before(opts.Since) {
			return false
		}
		if !opts.Until.IsZero() && e.Time.After(opts.Until) {
			return false
		}
		return true
	}
	var selected []Entry
	for _, e := range stored {
		if want(e) {
			selected = append(selected, e)
		}
	}
	if opts.Tail >= 0 && len(selected) > opts.Tail {
		selected = selected[len(selected)-opts.Tail:]
	}
	out := make(chan Entry)
	go func() {
		defer close(out)
		if sub != nil {
			defer l.unsubscribe(sub)
		}
		for _, e := range selected {
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
		if sub == nil {
			return
		}
		for {
			select {
			case e, ok := <-sub:
				if !ok {
					return
				}
				if !want(e) {
					continue
				}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (l *File) unsubscribe(ch chan Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.subs[ch]; ok {
		delete(l.subs, ch)
		close(ch)
	}
}

func readAll(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read log %s: %w", path, err)
	}
	defer f.Close()
	return decode(f, path)
}

// decode reads json-file records.
func decode(r io.Reader, path string) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			// A torn last line after a crash is skipped, not fatal.
			continue
		}
		out = append(out, Entry{Stream: r.Stream, Time: r.Time, Data: []byte(r.Log)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read log %s: %w", path, err)
	}
	return out, nil
}
