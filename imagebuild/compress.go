package imagebuild

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

type compression int

const (
	uncompressed compression = iota
	gzipped
	zstded
)

// sniff tells how a layer blob is compressed from its first bytes, as
// dockerd's DecompressStream does; media types in archives are not always
// truthful.
func sniff(br *bufio.Reader) compression {
	head, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		return gzipped
	case bytes.HasPrefix(head, zstdMagic):
		return zstded
	}
	return uncompressed
}

// layerMediaType is the OCI layer media type for a blob compressed as c.
func (c compression) layerMediaType() types.MediaType {
	switch c {
	case gzipped:
		return types.OCILayer
	case zstded:
		return types.OCILayerZStd
	}
	return types.OCIUncompressedLayer
}

// decompress wraps a layer blob so that reading yields the tar; closing it
// closes rc.
func decompress(rc io.ReadCloser) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(rc, 64<<10)
	switch sniff(br) {
	case gzipped:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return readCloser{Reader: zr, close: func() error { zr.Close(); return rc.Close() }}, nil
	case zstded:
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return readCloser{Reader: zr, close: func() error { zr.Close(); return rc.Close() }}, nil
	}
	return readCloser{Reader: br, close: rc.Close}, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }
