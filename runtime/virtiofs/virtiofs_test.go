package virtiofs

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	Reexec()
	os.Exit(m.Run())
}

func needVirtiofsd(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: virtiofsd and the helper's mount namespace")
	}
	if _, err := os.Stat(DefaultBinary); err != nil {
		t.Skipf("needs %s (qemu-system-common): %v", DefaultBinary, err)
	}
}

// viewOf is the staging directory as virtiofsd sees it, in its mount
// namespace: what it pivots into once a VMM connects.
func viewOf(s *Server) string {
	return "/proc/" + strconv.Itoa(s.PID()) + "/root" + filepath.Join(s.dir, s.name+".root")
}

func TestShares(t *testing.T) {
	needVirtiofsd(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file, roFile := filepath.Join(t.TempDir(), "app.conf"), filepath.Join(t.TempDir(), "ro.conf")
	for _, f := range []string{file, roFile} {
		if err := os.WriteFile(f, []byte("conf\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		share     Share
		readName  string
		want      string
		writeName string
		writable  bool
	}{
		{"dir rw", Share{Name: "fs0", Source: src}, "hello", "hi\n", "new", true},
		{"dir ro", Share{Name: "fs1", Source: src, ReadOnly: true}, "hello", "hi\n", "new-ro", false},
		{"file rw", Share{Name: "fs2", Source: file}, FileName, "conf\n", FileName, true},
		{"file ro", Share{Name: "fs3", Source: roFile, ReadOnly: true}, FileName, "conf\n", FileName, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := Start(ctx, dir, tt.share, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Kill()
			b, err := os.ReadFile(filepath.Join(viewOf(s), tt.readName))
			if err != nil || string(b) != tt.want {
				t.Fatalf("read %s in the share: %q, %v; want %q", tt.readName, b, err, tt.want)
			}
			werr := os.WriteFile(filepath.Join(viewOf(s), tt.writeName), []byte("w\n"), 0o644)
			if tt.writable && werr != nil {
				t.Errorf("write in a read-write share: %v", werr)
			}
			if !tt.writable && !errors.Is(werr, unix.EROFS) {
				t.Errorf("write in a read-only share: %v, want EROFS", werr)
			}
			if strings.HasPrefix(tt.name, "file") {
				entries, _ := os.ReadDir(viewOf(s))
				if len(entries) != 1 || entries[0].Name() != FileName {
					t.Errorf("a file share shows %v, want only %q", entries, FileName)
				}
				if err := os.WriteFile(filepath.Join(viewOf(s), "sibling"), nil, 0o644); !errors.Is(err, unix.EROFS) {
					t.Errorf("create beside a shared file: %v, want EROFS", err)
				}
			}
			mounts, err := os.ReadFile("/proc/self/mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(mounts), dir) {
				t.Errorf("the staging mount leaked into the host's mount table")
			}

			found, err := Find(dir, tt.share.Name, nil)
			if err != nil {
				t.Fatalf("find the running share: %v", err)
			}
			if found.PID() != s.PID() || found.Socket() != filepath.Join(dir, tt.share.Name+".sock") {
				t.Errorf("found pid %d socket %s, want %d in %s", found.PID(), found.Socket(), s.PID(), dir)
			}
			if got := Names(dir); !slices.Equal(got, []string{tt.share.Name}) {
				t.Errorf("Names = %q", got)
			}

			// The VMM's side: connect, then hang up; virtiofsd then exits
			// by itself.
			conn, err := net.Dial("unix", s.Socket())
			if err != nil {
				t.Fatalf("connect to the share's socket: %v", err)
			}
			conn.Close()
			if err := found.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			<-s.done
			if err := unix.Kill(s.PID(), 0); !errors.Is(err, unix.ESRCH) {
				t.Errorf("virtiofsd %d still exists after Stop: %v", s.PID(), err)
			}
			left, _ := os.ReadDir(dir)
			if len(left) != 0 {
				t.Errorf("Stop left %v in the VM dir", left)
			}
		})
	}
}

func TestStartFailsClean(t *testing.T) {
	needVirtiofsd(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := Start(ctx, dir, Share{Name: "fs0", Source: filepath.Join(dir, "missing")}, Options{}); err == nil {
		t.Fatal("a missing source started")
	}
	_, err := Start(ctx, dir, Share{Name: "fs0", Source: t.TempDir()}, Options{Binary: "/nonexistent/virtiofsd"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/virtiofsd") {
		t.Fatalf("a missing virtiofsd: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("a failed start left %v", left)
	}
	if _, err := Find(dir, "fs0", nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Find after a failed start: %v", err)
	}
}

func TestNames(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"qemu.pid", "fs0.pid", "fs1.pid"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"fs0.root", "fs1.root", "fs2.root"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if got := Names(dir); !slices.Equal(got, []string{"fs0", "fs1"}) {
		t.Errorf("Names = %q, want the shares with a pid file and a staging dir", got)
	}
}
