package containers

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/husk-vm/husk/rootfs"
	"github.com/husk-vm/husk/runtime/vmm"
)

// TestUpperUnwritten: an upper disk is fresh while its file is the one
// Create stamped, untouched; a write or a replacement makes it not.
func TestUpperUnwritten(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, path string)
		want   bool
	}{
		{"untouched", func(*testing.T, string) {}, true},
		{"written", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("x"), 0); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"replaced", func(t *testing.T, path string) {
			tmp := path + ".new"
			if err := os.WriteFile(tmp, []byte("fresh disk"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"removed", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), upperFile)
			if err := os.WriteFile(path, []byte("fresh disk"), 0o600); err != nil {
				t.Fatal(err)
			}
			st, err := rootfs.StampOf(path)
			if err != nil {
				t.Fatal(err)
			}
			// Past the file system's timestamp granularity.
			time.Sleep(20 * time.Millisecond)
			tt.change(t, path)
			disks := []vmm.Disk{{Path: "/base", ReadOnly: true, Serial: baseSerial}, {Path: path, Serial: upperSerial}}
			if got := upperUnwritten(disks, st); got != tt.want {
				t.Errorf("upperUnwritten = %v, want %v", got, tt.want)
			}
			if upperUnwritten(disks[:1], st) {
				t.Error("upperUnwritten without an upper disk = true")
			}
		})
	}
}
