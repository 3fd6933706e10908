package apicompat

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"

	"github.com/containerd/errdefs"
)

// Archives and build contexts may arrive compressed; the tar inside must
// come out unchanged either way.
func TestDecompressStream(t *testing.T) {
	payload := bytes.Repeat([]byte("tar bytes "), 1000)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(payload)
	zw.Close()
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"plain", payload},
		{"gzip", gz.Bytes()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decompressStream(bytes.NewReader(tc.in), "read archive")
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, payload) {
				t.Errorf("read %d bytes (%v), want the %d-byte payload", len(got), err, len(payload))
			}
		})
	}
	// A gzip magic number followed by garbage is the client's fault.
	_, err := decompressStream(bytes.NewReader([]byte{0x1f, 0x8b, 0, 0}), "read archive")
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("broken gzip header: %v, want an invalid-argument error", err)
	}
}
