package rootfs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mkfsFromDir formats a 64 MiB ext4 image populated from dir (mke2fs -d).
func mkfsFromDir(t *testing.T, dir string) string {
	t.Helper()
	if _, err := findDebugfs(); err != nil {
		t.Skip(err)
	}
	bin, err := findMkfs()
	if err != nil {
		t.Skip(err)
	}
	img := filepath.Join(t.TempDir(), "upper.ext4")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-q", "-F", "-t", "ext4", "-d", dir, img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs -d: %v: %s", err, out)
	}
	return img
}

func TestUpperUsage(t *testing.T) {
	src := t.TempDir()
	up := filepath.Join(src, UpperDir)
	write := func(rel string, size int) {
		p := filepath.Join(up, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Repeat("x", size)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/hostname", 6)
	write("a/b/c/d/deep", 1000)
	write("a/b/big", 70000)
	// A hard link counts once, as dockerd counts inodes.
	if err := os.Link(filepath.Join(up, "a/b/big"), filepath.Join(up, "a/linked")); err != nil {
		t.Fatal(err)
	}
	// A symlink counts its target's length, as lstat reports it.
	if err := os.Symlink("/etc/hostname", filepath.Join(up, "sym")); err != nil {
		t.Fatal(err)
	}
	// A sparse file counts its apparent size.
	if err := os.WriteFile(filepath.Join(up, "sparse"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(up, "sparse"), 1<<20); err != nil {
		t.Fatal(err)
	}
	// A name with a newline must not break the parsing.
	write("odd\nname", 3)
	// An overlay whiteout is a 0/0 character device: no bytes.
	if unix.Mknod(filepath.Join(up, "gone"), unix.S_IFCHR|0o644, 0) != nil {
		t.Log("not root: no whiteout in this run")
	}
	// The overlay's work directory is not the container's layer.
	if err := os.MkdirAll(filepath.Join(src, "work", "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "work", "w", "x"), make([]byte, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	img := mkfsFromDir(t, src)

	got, err := UpperUsage(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(6 + 1000 + 70000 + len("/etc/hostname") + 1<<20 + 3)
	if got != want {
		t.Errorf("UpperUsage = %d, want %d", got, want)
	}
}

func TestUpperUsageFreshDisk(t *testing.T) {
	// A disk no VM ran on yet has no upper directory.
	img := mkfsFromDir(t, t.TempDir())
	got, err := UpperUsage(context.Background(), img)
	if err != nil || got != 0 {
		t.Errorf("UpperUsage(fresh) = %d, %v; want 0, nil", got, err)
	}
	if _, err := UpperUsage(context.Background(), filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("UpperUsage of a missing disk succeeded")
	}
}

func TestParseLsP(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    []dirent
		wantErr bool
	}{
		{in: "debugfs: ls -p upper\n/12/040755/0/0/.//\n/18/100644/0/0/f/42/\n\n",
			want: []dirent{{ino: 12, name: ".", dir: true}, {ino: 18, name: "f", size: 42}}},
		{in: "/20/100644/0/0/we ird\nname/7/\n", want: []dirent{{ino: 20, name: "we ird\nname", size: 7}}},
		{in: "/x/100644/0/0/f/1/\n", wantErr: true},
		{in: "/1/100644/0/0/f/big/\n", wantErr: true},
	} {
		got, err := parseLsP(strings.NewReader(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("parseLsP(%q) error = %v", tt.in, err)
			continue
		}
		if tt.wantErr {
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("parseLsP(%q) = %+v, want %+v", tt.in, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("parseLsP(%q)[%d] = %+v, want %+v", tt.in, i, got[i], tt.want[i])
			}
		}
	}
}
