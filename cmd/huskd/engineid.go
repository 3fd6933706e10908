package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"
	"github.com/google/uuid"
)

// engineIDFile holds the daemon's ID under its root, as dockerd keeps it
// in <data-root>/engine-id.
const engineIDFile = "engine-id"

// loadOrCreateEngineID returns the ID GET /info reports, made once per
// root: tools tell daemons (and a daemon's restarts from a new one)
// apart by it, so it must not change while the root lives.
func loadOrCreateEngineID(root string) (string, error) {
	path := filepath.Join(root, engineIDFile)
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read engine ID: %w", err)
	}
	id := uuid.NewString()
	if err := renameio.WriteFile(path, []byte(id), 0o600); err != nil {
		return "", fmt.Errorf("write engine ID: %w", err)
	}
	return id, nil
}
