package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteArchiveModeTypeBits checks that archive headers carry the
// st_mode file-type bits as dockerd's do (docker cp shows 0100640, not
// 0640, to clients that read the header), and that sockets are skipped.
func TestWriteArchiveModeTypeBits(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	// A socket (a forwarded socket mount, an app's) is left out, as
	// dockerd's archive package does: tar has no type for it.
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var b bytes.Buffer
	if err := writeArchive(&b, dir); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		filepath.Base(dir) + "/":  0o40750,
		filepath.Base(dir) + "/f": 0o100640,
		filepath.Base(dir) + "/l": 0o120777,
	}
	got := map[string]int64{}
	tr := tar.NewReader(&b)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h.Mode
	}
	for name, mode := range want {
		if got[name] != mode {
			t.Errorf("%s: mode %o, want %o (all: %v)", name, got[name], mode, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("entries %v, want only %v", got, want)
	}
}
