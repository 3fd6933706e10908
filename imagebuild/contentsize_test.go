package imagebuild

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestContentSize(t *testing.T) {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	entries := []struct {
		h    tar.Header
		body string
	}{
		{tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, ""},
		{tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: 100}, strings.Repeat("x", 100)},
		{tar.Header{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "busybox"}, ""},
		{tar.Header{Name: "bin/ls", Typeflag: tar.TypeLink, Linkname: "bin/busybox"}, ""},
		{tar.Header{Name: "etc/.wh.gone", Typeflag: tar.TypeReg, Mode: 0o644}, ""},
		{tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}, ""},
		{tar.Header{Name: "etc/hostname", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5}, "husk\n"},
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&e.h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		stream  []byte
		want    int64
		wantErr bool
	}{
		// 100 + 5 bytes of files and the symlink's 7; the hard link, the
		// whiteout, the device and the directory add nothing.
		{"layer", layer.Bytes(), 112, false},
		{"empty archive", make([]byte, 1024), 0, false},
		{"not a tar", bytes.Repeat([]byte("not a tar "), 100000), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newContentSize()
			// Written in pieces, as io.Copy would: the measure never stops
			// taking bytes, tar or not.
			for b := tc.stream; len(b) > 0; {
				n := min(len(b), 4096)
				if _, err := c.Write(b[:n]); err != nil {
					t.Fatalf("write: %v", err)
				}
				b = b[n:]
			}
			got, err := c.result()
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("content size = %d, %v; want %d (error: %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
