package kernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"
)

// lockupMarker starts what the kernel's soft-lockup watchdog prints when
// a CPU has run kernel code without scheduling for twice
// watchdog_thresh (20 s by default): "watchdog: BUG: soft lockup - CPU#0
// stuck for 26s! [swapper/0:1]". It prints at KERN_EMERG, so a guest
// booted `quiet` shows it too.
const lockupMarker = "BUG: soft lockup - CPU#"

// SoftLockup says whether line, from a guest's console, is the kernel's
// soft-lockup watchdog reporting a stuck CPU.
func SoftLockup(line string) bool {
	return strings.Contains(line, lockupMarker)
}

// maxConsoleLine bounds the part of a console line kept while its end has
// not been written yet; the watchdog's line is far shorter.
const maxConsoleLine = 4096

// WatchLockup follows the console log at path from offset from, as the
// guest writes it, until the kernel reports a soft lockup there
// (SoftLockup), and returns that line. It looks every interval; a file
// not there yet is waited for, and one that shrinks (a new VMM truncated
// it) is read again from its start. It returns ctx's error when ctx ends
// first.
func WatchLockup(ctx context.Context, path string, from int64, every time.Duration) (string, error) {
	t := time.NewTicker(every)
	defer t.Stop()
	off := from
	var partial []byte
	for {
		b, size, err := readFrom(path, off)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return "", fmt.Errorf("watch console %s: %w", path, err)
		case size < off:
			off, partial = 0, nil
			continue
		default:
			off += int64(len(b))
			partial = append(partial, b...)
			for {
				i := bytes.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				if line := string(bytes.TrimRight(partial[:i], "\r")); SoftLockup(line) {
					return line, nil
				}
				partial = partial[i+1:]
			}
			if len(partial) > maxConsoleLine {
				partial = partial[len(partial)-maxConsoleLine:]
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C:
		}
	}
}

// ConsoleLength is how far the guest has written its console log at
// path, 0 if it has not begun: the offset from which a watch sees only
// what the guest writes next.
func ConsoleLength(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readFrom reads path from off to its end, and says how long it is.
func readFrom(path string, off int64) ([]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if st.Size() <= off {
		return nil, st.Size(), nil
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	return b, st.Size(), err
}

// LockupError is a boot given up on because its kernel reported a soft
// lockup; Line is the report.
type LockupError struct{ Line string }

func (e *LockupError) Error() string {
	return "the guest kernel reported a soft lockup: " + e.Line
}

// lockupInterval is how often WatchBootFrom reads the console. A guest booted
// quiet writes nothing there but such warnings.
const lockupInterval = 100 * time.Millisecond

// WatchBootFrom returns a copy of ctx that is cancelled, with a
// *LockupError as its cause, once the console log at path reports a soft
// lockup (WatchLockup) past offset from: a wait for a booting guest under
// it then ends ~25 s into a boot that hangs in a loop, not at its own
// timeout, and a wait that goes on after a lockup, once the guest has
// been helped out of it, ends only on a report that comes after. stop
// ends the watch and waits for it to end.
func WatchBootFrom(ctx context.Context, path string, from int64) (_ context.Context, stop func()) {
	ctx, giveUp := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if line, err := WatchLockup(ctx, path, from, lockupInterval); err == nil {
			giveUp(&LockupError{Line: line})
		}
	}()
	return ctx, func() {
		giveUp(nil)
		<-watched
	}
}

// LockedUp is the lockup that ended ctx, a context WatchBootFrom gave, or nil
// if it ended otherwise or has not.
func LockedUp(ctx context.Context) *LockupError {
	var lockup *LockupError
	if errors.As(context.Cause(ctx), &lockup) {
		return lockup
	}
	return nil
}
