//go:build linux

package agent

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// FuzzExtract feeds arbitrary bytes to the archive extraction (not
// chrooted, so os.Root alone must hold) and checks that nothing appears
// outside the destination. Seeds are in testdata/fuzz/FuzzExtract.
func FuzzExtract(f *testing.F) {
	f.Add(seedTar(f, tar.Header{Name: "../x", Typeflag: tar.TypeReg, Size: 1}, "a"))
	f.Add(seedTar(f, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"},
		tar.Header{Name: "l/x", Typeflag: tar.TypeReg, Size: 1}, "a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		dest := filepath.Join(base, "dest")
		if err := os.Mkdir(dest, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dest)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		_ = extractArchive(bytes.NewReader(data), root, extractOptions{chown: &[2]int{os.Getuid(), os.Getgid()}})
		entries, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != "dest" {
			t.Fatalf("extraction left %v next to the destination", entries)
		}
		// Nothing under dest may lead out of it either as a hard link to
		// a file outside (there is none to link to) or by having replaced
		// dest itself.
		if fi, err := os.Lstat(dest); err != nil || !fi.IsDir() {
			t.Fatalf("destination replaced: %v %v", fi, err)
		}
		_ = filepath.WalkDir(dest, func(string, fs.DirEntry, error) error { return nil })
	})
}

// seedTar builds an archive from headers; a string after a header is its
// content.
func seedTar(f *testing.F, parts ...any) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range parts {
		switch v := p.(type) {
		case tar.Header:
			if err := tw.WriteHeader(&v); err != nil {
				f.Fatal(err)
			}
		case string:
			tw.Write([]byte(v))
		}
	}
	tw.Close()
	return buf.Bytes()
}
