//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSetReadAhead(t *testing.T) {
	sysBlock := t.TempDir()
	queue := filepath.Join(sysBlock, "sda", "queue")
	if err := os.MkdirAll(queue, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(queue, "read_ahead_kb"), []byte("128\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := setReadAhead(sysBlock, "/dev/sda", 2048); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(queue, "read_ahead_kb")); string(b) != "2048" {
		t.Fatalf("read_ahead_kb = %q, want 2048", b)
	}
	if err := setReadAhead(sysBlock, "/dev/sdb", 2048); err == nil {
		t.Fatal("no error for a disk without a queue")
	}
}
