package imagebuild

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// unpackedFiles lists the unpacked cache.
func unpackedFiles(t *testing.T, root string) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(root, unpackedDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestUnpackedCache: a pull leaves each layer's tar in the cache and the
// image's layer openers read it (its digest is the diffID); a cache file
// of the wrong size is passed over for the blob; a reopened store starts
// with an empty cache; removing the image removes its files.
func TestUnpackedCache(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 2)
	push(t, host+"/u:v1", img)
	root := t.TempDir()
	s := newService(t, root, nil)
	ctx := context.Background()
	pull(t, s, host+"/u:v1")
	if got := unpackedFiles(t, root); len(got) != 2 {
		t.Fatalf("unpacked cache after a pull of 2 layers: %v", got)
	}
	got, err := s.Resolve(ctx, host+"/u:v1")
	if err != nil {
		t.Fatal(err)
	}
	assertLayersMatch(t, s, got)

	// The openers read the cache: a same-size file of zeros is what the
	// second layer's opener yields.
	layers, err := s.Layers(ctx, got.ID)
	if err != nil {
		t.Fatal(err)
	}
	m0, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	second := s.unpackedPath(m0.Layers[1].Digest)
	st, err := os.Stat(second)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(second, make([]byte, st.Size()), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := layers[1]()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || len(b) != int(st.Size()) || bytes.Count(b, []byte{0}) != len(b) {
		t.Errorf("the layer opener did not read the unpacked cache (%d bytes, %v)", len(b), err)
	}
	if err := os.Remove(second); err != nil {
		t.Fatal(err)
	}

	// A torn file (here: cut short) is not read; the blob is.
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(s.unpackedPath(m.Layers[0].Digest), 100); err != nil {
		t.Fatal(err)
	}
	assertLayersMatch(t, s, got)

	reopened := newService(t, root, nil)
	if files := unpackedFiles(t, root); len(files) != 0 {
		t.Errorf("cache of an earlier run kept: %v", files)
	}
	pull(t, reopened, host+"/u:v1") // layers already exist: nothing cached
	if _, err := reopened.Remove(ctx, host+"/u:v1", false, true); err != nil {
		t.Fatal(err)
	}
	if files := unpackedFiles(t, root); len(files) != 0 {
		t.Errorf("cache files outlive their image: %v", files)
	}
}

// TestUnpackedCacheRemovedWithImage: files written by this run go when
// their blobs do.
func TestUnpackedCacheRemovedWithImage(t *testing.T) {
	host := testRegistry(t, nil)
	img := randomImage(t, 1)
	push(t, host+"/r:v1", img)
	root := t.TempDir()
	s := newService(t, root, nil)
	pull(t, s, host+"/r:v1")
	if got := unpackedFiles(t, root); len(got) != 1 {
		t.Fatalf("unpacked cache: %v", got)
	}
	if _, err := s.Remove(context.Background(), host+"/r:v1", false, true); err != nil {
		t.Fatal(err)
	}
	if files := unpackedFiles(t, root); len(files) != 0 {
		t.Errorf("cache files outlive their image: %v", files)
	}
}
