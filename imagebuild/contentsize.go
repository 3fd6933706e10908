package imagebuild

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
)

// contentSize measures a layer as dockerd reports it (image Size, history,
// system df): the sum of the sizes of the files the layer unpacks to, as
// overlay2's DiffSize walks them. Directories count nothing, a symlink its
// target's length (its lstat size), a hard link nothing more (dockerd
// counts an inode once), and tar's headers and padding nothing. The tar
// size husk used to report overstated a busybox image by 7%.
//
// It runs beside whatever already reads the tar (the diffID check, a
// build's layer store) through a pipe, so a layer is read once.
type contentSize struct {
	pw   *io.PipeWriter
	done chan struct{}
	n    int64
	err  error
}

func newContentSize() *contentSize {
	pr, pw := io.Pipe()
	c := &contentSize{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.n, c.err = sumContent(pr)
		// Whatever follows the archive's end (padding), or all of a
		// stream that is not a tar, is drained so writers never block.
		_, _ = io.Copy(io.Discard, pr)
	}()
	return c
}

func (c *contentSize) Write(p []byte) (int, error) { return c.pw.Write(p) }

// result ends the stream and returns the content size; an error says the
// stream was not a readable tar.
func (c *contentSize) result() (int64, error) {
	c.pw.Close()
	<-c.done
	return c.n, c.err
}

// abort ends the measure of a stream that will not be completed.
func (c *contentSize) abort() {
	c.pw.CloseWithError(errors.New("layer read aborted"))
	<-c.done
}

func sumContent(r io.Reader) (int64, error) {
	tr := tar.NewReader(r)
	var n int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("measure layer content: %w", err)
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeGNUSparse:
			n += h.Size
		case tar.TypeSymlink:
			n += int64(len(h.Linkname))
		}
	}
}
