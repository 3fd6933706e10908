//go:build linux

package agent_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"

	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// tarOf builds an archive; a "->" in a name makes a symlink, "=>" a hard
// link, a trailing "/" a directory.
func tarOf(t *testing.T, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e[0], Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e[1]))}
		switch {
		case bytes.HasPrefix([]byte(e[1]), []byte("->")):
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeSymlink, e[1][2:], 0
		case bytes.HasPrefix([]byte(e[1]), []byte("=>")):
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, e[1][2:], 0
		case e[0][len(e[0])-1] == '/':
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			tw.Write([]byte(e[1]))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func agentErrorKind(err error) proto.ErrorKind {
	var ae *host.AgentError
	if errors.As(err, &ae) {
		return ae.Kind
	}
	return ""
}

func TestArchives(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)

	st, err := c.ArchiveStat(ctx(t), "/etc/passwd")
	if err != nil || st.Name != "passwd" || !fs.FileMode(st.Mode).IsRegular() || st.Size == 0 {
		t.Errorf("stat /etc/passwd = %+v, %v", st, err)
	}
	st, err = c.ArchiveStat(ctx(t), "/bin/sh")
	if err != nil || fs.FileMode(st.Mode)&fs.ModeSymlink == 0 || st.LinkTarget != "/bin/busybox" {
		t.Errorf("stat /bin/sh = %+v, %v; want a symlink to /bin/busybox", st, err)
	}
	if _, err := c.ArchiveStat(ctx(t), "/nope"); agentErrorKind(err) != proto.KindNotFound {
		t.Errorf("stat /nope: %v, want %s", err, proto.KindNotFound)
	}

	// Entries are named from the requested path's last element.
	_, rc, err := c.ArchiveGet(ctx(t), "/etc")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read archive of /etc: %v", err)
		}
		names = append(names, hdr.Name)
	}
	rc.Close()
	sort.Strings(names)
	if got, want := names, []string{"etc/", "etc/group", "etc/notexec", "etc/passwd"}; !equal(got, want) {
		t.Errorf("archive of /etc: %v, want %v", got, want)
	}

	// Upload: absolute names are confined under the destination, a symlink
	// may point anywhere in the container, and uid/gid can be the user's.
	good := tarOf(t, [2]string{"new/", ""}, [2]string{"new/file", "content"}, [2]string{"/abs", "x"},
		[2]string{"lnk", "->/etc/passwd"}, [2]string{"hard", "=>new/file"})
	if err := c.ArchivePut(ctx(t), proto.ArchiveSpec{Path: "/home/app", ChownTo: "app"}, bytes.NewReader(good)); err != nil {
		t.Fatalf("put: %v", err)
	}
	home := filepath.Join(f.root, "home/app")
	if b, err := os.ReadFile(filepath.Join(home, "new/file")); err != nil || string(b) != "content" {
		t.Errorf("new/file = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(home, "abs")); err != nil {
		t.Errorf("absolute name not confined under the destination: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(home, "lnk")); err != nil || l != "/etc/passwd" {
		t.Errorf("lnk = %q, %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(home, "new/file")); err != nil || fi.Sys().(*syscallStat).Uid != 1000 {
		t.Errorf("owner of new/file: %v", err)
	}

	for _, tt := range []struct {
		name string
		dest string
		tar  []byte
		kind proto.ErrorKind
	}{
		{"climbs out", "/home/app", tarOf(t, [2]string{"../../escaped", "x"}), proto.KindInvalid},
		{"hard link out", "/home/app", tarOf(t, [2]string{"h", "=>../../etc/passwd"}), proto.KindInvalid},
		{"write through an escaping symlink", "/home/app", tarOf(t, [2]string{"up", "->/"}, [2]string{"up/escaped2", "x"}), proto.KindInvalid},
		{"not a directory", "/etc/passwd", tarOf(t, [2]string{"x", "y"}), proto.KindInvalid},
		{"missing destination", "/nope", tarOf(t, [2]string{"x", "y"}), proto.KindNotFound},
	} {
		err := c.ArchivePut(ctx(t), proto.ArchiveSpec{Path: tt.dest}, bytes.NewReader(tt.tar))
		if agentErrorKind(err) != tt.kind {
			t.Errorf("%s: put = %v, want %s", tt.name, err, tt.kind)
		}
	}
	for _, p := range []string{"escaped", "escaped2", "home/escaped"} {
		if _, err := os.Lstat(filepath.Join(f.root, p)); err == nil {
			t.Errorf("%s was created outside the destination", p)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(f.root), "escaped")); err == nil {
		t.Error("a file escaped the container root")
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type syscallStat = syscall.Stat_t
