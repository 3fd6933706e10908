package kernel

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
)

// BootDigests caches the sha256 digests ("sha256:<hex>") of a guest
// kernel and initramfs, which checkpoints and templates record and
// compare on every use; they are recomputed only when a file's size or
// modification time changes. The zero value is ready to use.
type BootDigests struct {
	mu                sync.Mutex
	key               string
	kernel, initramfs string
}

// Get returns the digests of the kernel and initramfs files.
func (b *BootDigests) Get(kernel, initramfs string) (string, string, error) {
	key := ""
	for _, p := range []string{kernel, initramfs} {
		st, err := os.Stat(p)
		if err != nil {
			return "", "", fmt.Errorf("guest boot file: %w", err)
		}
		key += fmt.Sprintf("%s:%d:%d;", p, st.Size(), st.ModTime().UnixNano())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if key == b.key {
		return b.kernel, b.initramfs, nil
	}
	k, err := fileSHA256(kernel)
	if err != nil {
		return "", "", err
	}
	i, err := fileSHA256(initramfs)
	if err != nil {
		return "", "", err
	}
	b.key, b.kernel, b.initramfs = key, k, i
	return k, i, nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("digest %s: %w", p, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("digest %s: %w", p, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
