package logs

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/google/renameio/v2"
)

// Options are the json-file driver's rotation options (--log-opt).
type Options struct {
	// MaxSize is the size at which the file is rotated; 0 never rotates.
	// As dockerd's json-file, the check comes before each entry, so a
	// file ends at the first entry that reaches the size.
	MaxSize int64
	// MaxFiles is how many files are kept, the live one included; 1 (or
	// less) truncates the live file instead of rotating it.
	MaxFiles int
	// Compress gzips rotated files (NAME.1.gz, ...).
	Compress bool
	// Discard stores nothing (the "none" driver): attached clients still
	// get the output, but nothing can be read back.
	Discard bool
}

// SetOptions changes how the log is stored from the next entry on.
func (l *File) SetOptions(o Options) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opts = o
}

// rotateIfFull rotates the live file when it reached MaxSize. Callers hold
// l.mu.
func (l *File) rotateIfFull() error {
	if l.opts.MaxSize <= 0 || l.f == nil {
		return nil
	}
	if l.size < 0 {
		st, err := l.f.Stat()
		if err != nil {
			return fmt.Errorf("stat log %s: %w", l.path, err)
		}
		l.size = st.Size()
	}
	if l.size < l.opts.MaxSize {
		return nil
	}
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("close log %s: %w", l.path, err)
	}
	l.f = nil
	if l.opts.MaxFiles > 1 {
		if err := l.shift(); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("reopen log %s: %w", l.path, err)
	}
	l.f, l.size = f, 0
	return nil
}

// rotatedName is the n-th rotated file (n >= 1).
func (l *File) rotatedName(n int, compressed bool) string {
	name := l.path + "." + strconv.Itoa(n)
	if compressed {
		name += ".gz"
	}
	return name
}

// shift drops the oldest rotated file, moves each other one up a place and
// the live file to NAME.1 (compressed when asked). A crash in between
// loses at most the oldest file; every step is a rename.
func (l *File) shift() error {
	last := l.opts.MaxFiles - 1
	for _, gz := range []bool{false, true} {
		if err := os.Remove(l.rotatedName(last, gz)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("drop oldest log: %w", err)
		}
	}
	for n := last - 1; n >= 1; n-- {
		for _, gz := range []bool{false, true} {
			err := os.Rename(l.rotatedName(n, gz), l.rotatedName(n+1, gz))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("rotate log: %w", err)
			}
		}
	}
	if !l.opts.Compress {
		if err := os.Rename(l.path, l.rotatedName(1, false)); err != nil {
			return fmt.Errorf("rotate log: %w", err)
		}
		return nil
	}
	if err := compressFile(l.path, l.rotatedName(1, true)); err != nil {
		return err
	}
	if err := os.Remove(l.path); err != nil {
		return fmt.Errorf("rotate log: %w", err)
	}
	return nil
}

// compressFile writes src gzipped to dst, atomically.
func compressFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	defer in.Close()
	out, err := renameio.NewPendingFile(dst, renameio.WithPermissions(0o640))
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	defer out.Cleanup()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress log %s: %w", src, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress log %s: %w", src, err)
	}
	if err := out.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("compress log %s: %w", src, err)
	}
	return nil
}

// readStored reads the rotated files, oldest first, then the live one.
// Callers hold l.mu.
func (l *File) readStored() ([]Entry, error) {
	var out []Entry
	for n := l.opts.MaxFiles - 1; n >= 1; n-- {
		entries, err := readRotated(l.rotatedName(n, false), l.rotatedName(n, true))
		if err != nil {
			return nil, err
		}
		out = append(out, entries...)
	}
	live, err := readAll(l.path)
	if err != nil {
		return nil, err
	}
	return append(out, live...), nil
}

// readRotated reads one rotated file, plain or gzipped, if it exists.
func readRotated(plain, gz string) ([]Entry, error) {
	if _, err := os.Stat(plain); err == nil {
		return readAll(plain)
	}
	f, err := os.Open(gz)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read log %s: %w", gz, err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read log %s: %w", gz, err)
	}
	defer zr.Close()
	return decode(zr, gz)
}
