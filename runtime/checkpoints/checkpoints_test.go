package checkpoints

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
)

func write(t *testing.T, path string, data []byte, size int64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

func fill(t *testing.T) func(string) (Manifest, error) {
	return func(tmp string) (Manifest, error) {
		write(t, filepath.Join(tmp, "vm", "vmstate"), []byte("memory"), 2<<20)
		write(t, filepath.Join(tmp, "upper.ext4"), []byte("disk"), 1<<30)
		return Manifest{ImageID: "sha256:abc", Config: &container.Config{Image: "x"}, MemoryMiB: 256}, nil
	}
}

func TestCreateListOpenRemove(t *testing.T) {
	ctx := context.Background()
	d := Dir(filepath.Join(t.TempDir(), "checkpoints"))
	if l, err := d.List(); err != nil || len(l) != 0 {
		t.Fatalf("List of a missing dir: %v, %v", l, err)
	}
	man, err := d.Create(ctx, "cp1", fill(t))
	if err != nil {
		t.Fatal(err)
	}
	if man.FormatVersion != FormatVersion || man.Name != "cp1" || man.Created.IsZero() || len(man.Files) != 2 {
		t.Fatalf("manifest %+v", man)
	}
	for _, f := range man.Files {
		if !strings.HasPrefix(f.Digest, DigestAlgorithm+":") || f.Size == 0 {
			t.Errorf("file %+v", f)
		}
	}
	if _, err := d.Create(ctx, "cp1", fill(t)); !errdefs.IsAlreadyExists(err) {
		t.Errorf("second create of cp1: %v, want already exists", err)
	}
	l, err := d.List()
	if err != nil || len(l) != 1 || l[0].Name != "cp1" {
		t.Fatalf("List = %+v, %v", l, err)
	}
	c, err := d.Open("cp1")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Manifest.ImageID != "sha256:abc" || c.Manifest.MemoryMiB != 256 {
		t.Errorf("opened manifest %+v", c.Manifest)
	}
	if _, err := d.Open("nope"); !errdefs.IsNotFound(err) {
		t.Errorf("Open(nope): %v, want not found", err)
	}
	if err := d.Remove("cp1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("cp1"); !errdefs.IsNotFound(err) {
		t.Errorf("second Remove: %v, want not found", err)
	}
	entries, _ := os.ReadDir(string(d))
	if len(entries) != 0 {
		t.Errorf("left in dir after remove: %v", entries)
	}
}

func TestVerifyCatchesDamage(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		damage func(dir string) error
	}{
		{"flipped byte", func(dir string) error {
			f, err := os.OpenFile(filepath.Join(dir, "upper.ext4"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("D"), 1<<20)
			return err
		}},
		{"truncated", func(dir string) error { return os.Truncate(filepath.Join(dir, "vm", "vmstate"), 100) }},
		{"missing", func(dir string) error { return os.Remove(filepath.Join(dir, "vm", "vmstate")) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Dir(t.TempDir())
			if _, err := d.Create(ctx, "cp", fill(t)); err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(d.Path("cp")); err != nil {
				t.Fatal(err)
			}
			c, err := d.Open("cp")
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Verify(ctx); !errdefs.IsDataLoss(err) {
				t.Errorf("Verify: %v, want data loss", err)
			}
		})
	}
}

func TestFailedCreateLeavesNothing(t *testing.T) {
	d := Dir(t.TempDir())
	boom := errors.New("boom")
	_, err := d.Create(context.Background(), "cp", func(tmp string) (Manifest, error) {
		write(t, filepath.Join(tmp, "upper.ext4"), []byte("x"), 1<<20)
		return Manifest{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Create: %v", err)
	}
	if entries, _ := os.ReadDir(string(d)); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestCleanStale: a temporary directory whose builder died is removed and
// never listed; one whose builder still holds it stays.
func TestCleanStale(t *testing.T) {
	d := Dir(t.TempDir())
	dead := filepath.Join(string(d), tempPrefix+"dead-1")
	write(t, filepath.Join(dead, "upper.ext4"), []byte("x"), 1<<20)
	write(t, filepath.Join(dead, ManifestFile), []byte("{}"), 2)
	live := filepath.Join(string(d), tempPrefix+"live-1")
	if err := os.Mkdir(live, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := lockDir(live, true)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if l, _ := d.List(); len(l) != 0 {
		t.Errorf("List shows temporary dirs: %+v", l)
	}
	if err := d.Clean(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("stale dir still there (%v)", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("dir of a build under way removed: %v", err)
	}
}

func TestDigestIgnoresLayout(t *testing.T) {
	dir := t.TempDir()
	sparse := filepath.Join(dir, "sparse")
	write(t, sparse, []byte("content"), 8<<20)
	dense := filepath.Join(dir, "dense")
	b, err := os.ReadFile(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dense, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d1, _, err := Digest(ctx, sparse)
	if err != nil {
		t.Fatal(err)
	}
	d2, _, err := Digest(ctx, dense)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Errorf("same content, different digests: %s %s", d1, d2)
	}
	if err := os.Truncate(dense, 9<<20); err != nil {
		t.Fatal(err)
	}
	if d3, _, _ := Digest(ctx, dense); d3 == d1 {
		t.Error("digest ignores the size")
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"cp1": true, "a.b-c_d": true, "x": false, "": false, "..": false, "a/b": false,
		"../x": false, "-x": false, "cp.": false, "ok.1": true,
	} {
		if got := ValidName(name); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", name, got, want)
		}
	}
}
