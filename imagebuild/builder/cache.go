package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/google/renameio/v2"
)

// stepCache maps a build step to the image it produced: the key digests
// the parent image ID, the step's history line (which for RUN carries the
// build args it saw and for COPY/ADD the digest of the layer it makes from
// its sources) and the resulting container config. It lives in one JSON
// file, rewritten atomically on every new entry; entries whose image has
// since been removed are dropped when looked up.
type stepCache struct {
	path string

	mu      sync.Mutex
	entries map[string]string
}

func openStepCache(dir string) (*stepCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create build cache dir: %w", err)
	}
	c := &stepCache{path: filepath.Join(dir, "build-cache.json"), entries: map[string]string{}}
	b, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read build cache: %w", err)
	}
	if err := json.Unmarshal(b, &c.entries); err != nil {
		return nil, fmt.Errorf("decode build cache %s: %w", c.path, err)
	}
	return c, nil
}

func cacheKey(parent, createdBy string, config []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(parent), []byte(createdBy), config} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (c *stepCache) get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.entries[key]
	return id, ok
}

func (c *stepCache) put(key, imageID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[key] = imageID
	return c.saveLocked()
}

func (c *stepCache) drop(key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok {
		return nil
	}
	delete(c.entries, key)
	return c.saveLocked()
}

func (c *stepCache) saveLocked() error {
	b, err := json.Marshal(c.entries)
	if err != nil {
		return fmt.Errorf("encode build cache: %w", err)
	}
	if err := renameio.WriteFile(c.path, b, 0o600); err != nil {
		return fmt.Errorf("write build cache: %w", err)
	}
	d, err := os.Open(filepath.Dir(c.path))
	if err != nil {
		return fmt.Errorf("sync build cache dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync build cache dir: %w", err)
	}
	return nil
}
