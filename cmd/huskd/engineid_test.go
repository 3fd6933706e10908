package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
)

// TestEngineID: the ID is a UUID made on first start and the same on
// every start after, from the file dockerd keeps it in.
func TestEngineID(t *testing.T) {
	root := t.TempDir()
	id, err := loadOrCreateEngineID(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uuid.Parse(id); err != nil {
		t.Errorf("engine ID %q is not a UUID: %v", id, err)
	}
	again, err := loadOrCreateEngineID(root)
	if err != nil || again != id {
		t.Errorf("second start: %q, %v; want %q", again, err, id)
	}
	if b, err := os.ReadFile(filepath.Join(root, "engine-id")); err != nil || string(b) != id {
		t.Errorf("engine-id file holds %q (%v), want %q", b, err, id)
	}
	if other, err := loadOrCreateEngineID(t.TempDir()); err != nil || other == id {
		t.Errorf("another root got %q (%v), the same as the first", other, err)
	}
}
