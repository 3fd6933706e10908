// Package store is a content-addressed blob store on local disk: every blob
// lives once at <root>/blobs/sha256/<hex>, named by the SHA-256 of its bytes.
// It knows nothing about images; pulls, loads and the Dockerfile builder all
// put their manifests, configs and layers here.
//
// Writes go to a private temporary file in <root>/blobs/tmp, are hashed while
// they are written, synced, and renamed into place only when the digest is
// right, so readers never see a partial blob and concurrent writers of the
// same content simply race to rename identical files.
package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ErrDigestMismatch is returned when written content does not hash to the
// digest the caller expected.
var ErrDigestMismatch = errors.New("digest mismatch")

// Store is a directory of blobs. Its methods are safe for concurrent use.
type Store struct {
	dir string // <root>/blobs
}

// New opens (creating if needed) the store under root.
func New(root string) (*Store, error) {
	dir := filepath.Join(root, "blobs")
	for _, d := range []string{filepath.Join(dir, "sha256"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create blob dir %s: %w", d, err)
		}
	}
	// Temporary files left by a crash are garbage: nothing refers to them.
	tmps, _ := os.ReadDir(filepath.Join(dir, "tmp"))
	for _, t := range tmps {
		_ = os.Remove(filepath.Join(dir, "tmp", t.Name()))
	}
	return &Store{dir: dir}, nil
}

// Path is where the blob with digest h lives (whether or not it exists).
func (s *Store) Path(h v1.Hash) string {
	return filepath.Join(s.dir, h.Algorithm, h.Hex)
}

// Has reports whether the blob is present.
func (s *Store) Has(h v1.Hash) bool {
	if !valid(h) {
		return false
	}
	_, err := os.Stat(s.Path(h))
	return err == nil
}

// Size is the blob's length in bytes.
func (s *Store) Size(h v1.Hash) (int64, error) {
	if !valid(h) {
		return 0, fmt.Errorf("stat blob %s: %w", h, fs.ErrNotExist)
	}
	fi, err := os.Stat(s.Path(h))
	if err != nil {
		return 0, fmt.Errorf("stat blob %s: %w", h, err)
	}
	return fi.Size(), nil
}

// Open returns the blob for reading.
func (s *Store) Open(h v1.Hash) (*os.File, error) {
	if !valid(h) {
		return nil, fmt.Errorf("open blob %s: %w", h, fs.ErrNotExist)
	}
	f, err := os.Open(s.Path(h))
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", h, err)
	}
	return f, nil
}

// ReadAll returns the blob's bytes; meant for small blobs (configs,
// manifests).
func (s *Store) ReadAll(h v1.Hash) ([]byte, error) {
	f, err := s.Open(h)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", h, err)
	}
	return b, nil
}

// Writer receives one blob. Close discards it unless Commit succeeded.
type Writer struct {
	s    *Store
	f    *os.File
	hash hashWriter
	n    int64
	done bool
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

// Create starts a new blob.
func (s *Store) Create() (*Writer, error) {
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob-")
	if err != nil {
		return nil, fmt.Errorf("create temporary blob: %w", err)
	}
	return &Writer{s: s, f: f, hash: sha256.New()}, nil
}

func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.hash.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// Digest is the digest of what has been written so far.
func (w *Writer) Digest() v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(w.hash.Sum(nil))}
}

// Size is the number of bytes written so far.
func (w *Writer) Size() int64 { return w.n }

// Commit makes the blob visible under its digest. If expected is not the
// zero Hash, the content must hash to it, else ErrDigestMismatch.
func (w *Writer) Commit(expected v1.Hash) (v1.Hash, error) {
	got := w.Digest()
	if expected != (v1.Hash{}) && expected != got {
		return got, fmt.Errorf("commit blob: expected %s, got %s: %w", expected, got, ErrDigestMismatch)
	}
	if err := w.f.Sync(); err != nil {
		return got, fmt.Errorf("sync blob %s: %w", got, err)
	}
	if err := w.f.Close(); err != nil {
		return got, fmt.Errorf("close blob %s: %w", got, err)
	}
	if err := os.Rename(w.f.Name(), w.s.Path(got)); err != nil {
		return got, fmt.Errorf("store blob %s: %w", got, err)
	}
	w.done = true
	if err := syncDir(filepath.Dir(w.s.Path(got))); err != nil {
		return got, err
	}
	return got, nil
}

// Close releases the writer, discarding the content unless committed.
func (w *Writer) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	_ = w.f.Close()
	if err := os.Remove(w.f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove temporary blob: %w", err)
	}
	return nil
}

// Put stores r's content, verifying it against expected unless that is the
// zero Hash.
func (s *Store) Put(r io.Reader, expected v1.Hash) (v1.Hash, int64, error) {
	w, err := s.Create()
	if err != nil {
		return v1.Hash{}, 0, err
	}
	defer w.Close()
	if _, err := io.Copy(w, r); err != nil {
		return v1.Hash{}, 0, fmt.Errorf("write blob: %w", err)
	}
	h, err := w.Commit(expected)
	return h, w.Size(), err
}

// PutBytes stores b and returns its digest.
func (s *Store) PutBytes(b []byte) (v1.Hash, error) {
	h, _, err := s.Put(bytes.NewReader(b), v1.Hash{})
	return h, err
}

// Delete removes a blob; removing an absent blob is not an error.
func (s *Store) Delete(h v1.Hash) error {
	if !valid(h) {
		return nil
	}
	if err := os.Remove(s.Path(h)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete blob %s: %w", h, err)
	}
	return nil
}

// List returns the digests of all stored blobs.
func (s *Store) List() ([]v1.Hash, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "sha256"))
	if err != nil {
		return nil, fmt.Errorf("list blobs: %w", err)
	}
	out := make([]v1.Hash, 0, len(ents))
	for _, e := range ents {
		h := v1.Hash{Algorithm: "sha256", Hex: e.Name()}
		if valid(h) {
			out = append(out, h)
		}
	}
	return out, nil
}

// valid guards against digests that would escape the store directory.
func valid(h v1.Hash) bool {
	if h.Algorithm != "sha256" || len(h.Hex) != 64 {
		return false
	}
	_, err := hex.DecodeString(h.Hex)
	return err == nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
