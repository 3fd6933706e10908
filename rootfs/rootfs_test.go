package rootfs

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// ent describes one tar entry of a test layer.
type ent struct {
	name     string
	typ      byte // default tar.TypeReg
	mode     int64
	uid, gid int
	body     string
	link     string
	major    int64
	minor    int64
	xattrs   map[string]string
}

func file(name, body string) ent { return ent{name: name, body: body, mode: 0o644} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func whiteout(name string) ent   { return ent{name: name, mode: 0o644} }
func hardlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeLink, link: target}
}
func symlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}

var mtime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

func layerTar(t testing.TB, ents []ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{
			Typeflag: typ, Name: e.name, Linkname: e.link, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, ModTime: mtime, Devmajor: e.major, Devminor: e.minor,
			Format: tar.FormatPAX,
		}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		for k, v := range e.xattrs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("write header %s: %v", e.name, err)
		}
		if typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func openers(t testing.TB, layers ...[]ent) []LayerOpener {
	var out []LayerOpener
	for _, l := range layers {
		b := layerTar(t, l)
		out = append(out, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	}
	return out
}

func findTool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return filepath.Join(d, name)
		}
	}
	t.Skipf("%s not found (install e2fsprogs) — cannot inspect ext4 images without mounting", name)
	return ""
}

// debugfs runs one read-only debugfs request and returns stdout and stderr.
func debugfs(t testing.TB, img, req string) (string, string) {
	t.Helper()
	cmd := exec.Command(findTool(t, "debugfs"), "-R", req, img)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("debugfs -R %q: %v: %s", req, err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

func e2fsckClean(t testing.TB, img string) {
	t.Helper()
	out, err := exec.Command(findTool(t, "e2fsck"), "-fn", img).CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -fn %s: %v\n%s", img, err, out)
	}
}

// inode is what debugfs reports about one path.
type inode struct {
	num, links, uid, gid int
	typ                  string
	perm                 int64
	size                 int64
	linkDest             string
	dev                  string
}

var (
	reInode = regexp.MustCompile(`Inode: (\d+)\s+Type: ([a-zA-Z ]+?)\s+Mode:\s+(\d+)`)
	reOwner = regexp.MustCompile(`User:\s+(\d+)\s+Group:\s+(\d+).*Size: (\d+)`)
	reLinks = regexp.MustCompile(`Links: (\d+)`)
	reDest  = regexp.MustCompile(`Fast link dest: "(.*)"`)
	reDev   = regexp.MustCompile(`Device major/minor number: (\d+:\d+)`)
)

func stat(t testing.TB, img, p string) (inode, bool) {
	t.Helper()
	out, errOut := debugfs(t, img, "stat "+p)
	if strings.Contains(errOut, "File not found") || strings.Contains(errOut, "is not a directory") {
		return inode{}, false
	}
	m := reInode.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("stat %s: unexpected debugfs output:\n%s%s", p, out, errOut)
	}
	var n inode
	n.num, _ = strconv.Atoi(m[1])
	n.typ = m[2]
	n.perm, _ = strconv.ParseInt(m[3], 8, 64)
	if o := reOwner.FindStringSubmatch(out); o != nil {
		n.uid, _ = strconv.Atoi(o[1])
		n.gid, _ = strconv.Atoi(o[2])
		n.size, _ = strconv.ParseInt(o[3], 10, 64)
	}
	if l := reLinks.FindStringSubmatch(out); l != nil {
		n.links, _ = strconv.Atoi(l[1])
	}
	if d := reDest.FindStringSubmatch(out); d != nil {
		n.linkDest = d[1]
	}
	if d := reDev.FindStringSubmatch(out); d != nil {
		n.dev = d[1]
	}
	return n, true
}

// cat returns a file's content. debugfs pads inline-data files to the
// 60-byte inline area, so the result is cut to the inode's size.
func cat(t testing.TB, img, p string, size int64) string {
	out, _ := debugfs(t, img, "cat "+p)
	if int64(len(out)) > size {
		out = out[:size]
	}
	return out
}

func children(t testing.TB, img, p string) []string {
	out, _ := debugfs(t, img, "ls -p "+p)
	var names []string
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Split(line, "/")
		if len(f) < 6 || f[5] == "" || f[5] == "." || f[5] == ".." {
			continue
		}
		names = append(names, f[5])
	}
	slices.Sort(names)
	return names
}

// want is an expectation about one path of the built image.
type want struct {
	path     string
	absent   bool
	typ      string // as debugfs names it: regular, directory, symlink, ...
	perm     int64  // checked when non-zero
	uid, gid int
	body     *string
	links    int // checked when non-zero
	linkDest string
	dev      string
	children []string // checked when non-nil
	sameAs   string   // path that must be the same inode
	xattr    [2]string
}

func str(s string) *string { return &s }

func buildImage(t *testing.T, layers []LayerOpener) string {
	t.Helper()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.EnsureBase(context.Background(), "sha256:"+strings.Repeat("ab", 32), layers)
	if err != nil {
		t.Fatalf("EnsureBase: %v", err)
	}
	return img
}

func TestEnsureBaseContent(t *testing.T) {
	findTool(t, "debugfs")
	findTool(t, "e2fsck")
	big := strings.Repeat("0123456789abcdef", 70000) // > 1 MiB, several blocks
	longTarget := "/" + strings.Repeat("long/", 20) + "target"
	tests := []struct {
		name   string
		layers [][]ent
		want   []want
	}{{
		name: "single layer",
		layers: [][]ent{{
			{name: "./", typ: tar.TypeDir, mode: 0o755},
			dir("etc/"), file("etc/hostname", "box\n"), file("etc/empty", ""),
			{name: "bin/big", body: big, mode: 0o755},
		}},
		want: []want{
			{path: "/", children: []string{"bin", "etc", "lost+found"}, perm: 0o755},
			{path: "/etc", typ: "directory", perm: 0o755, children: []string{"empty", "hostname"}},
			{path: "/etc/hostname", typ: "regular", perm: 0o644, body: str("box\n"), links: 1},
			{path: "/etc/empty", typ: "regular", body: str("")},
			{path: "/bin/big", typ: "regular", perm: 0o755, body: &big},
		},
	}, {
		name: "file deleted by a later whiteout",
		layers: [][]ent{
			{dir("a/"), file("a/f", "f"), file("a/g", "g")},
			{whiteout("a/.wh.f")},
		},
		want: []want{
			{path: "/a/f", absent: true},
			{path: "/a", children: []string{"g"}},
			{path: "/a/g", body: str("g")},
		},
	}, {
		name: "directory with children deleted by a whiteout",
		layers: [][]ent{
			{dir("d/"), file("d/x", "x"), dir("d/sub/"), file("d/sub/y", "y"), file("keep", "k")},
			{whiteout(".wh.d")},
		},
		want: []want{
			{path: "/d", absent: true},
			{path: "/d/sub/y", absent: true},
			{path: "/", children: []string{"keep", "lost+found"}},
		},
	}, {
		name: "opaque directory",
		layers: [][]ent{
			{dir("o/"), file("o/old", "old"), dir("o/sub/"), file("o/sub/x", "x")},
			{{name: "o/", typ: tar.TypeDir, mode: 0o700}, whiteout("o/.wh..wh..opq"), file("o/new", "new")},
		},
		want: []want{
			{path: "/o", typ: "directory", perm: 0o700, children: []string{"new"}},
			{path: "/o/old", absent: true},
			{path: "/o/sub", absent: true},
			{path: "/o/new", body: str("new")},
		},
	}, {
		name: "opaque marker after the layer's own children",
		layers: [][]ent{
			{dir("o/"), file("o/old", "old"), file("o/both", "lower")},
			{dir("o/"), file("o/both", "upper"), whiteout("o/.wh..wh..opq")},
		},
		want: []want{
			{path: "/o", children: []string{"both"}},
			{path: "/o/both", body: str("upper")},
		},
	}, {
		name: "whiteout only hides lower layers",
		layers: [][]ent{
			{file("x", "lower")},
			{file("x", "upper"), whiteout(".wh.x")},
		},
		want: []want{{path: "/x", body: str("upper")}},
	}, {
		name: "directory metadata changed by a later layer keeps its children",
		layers: [][]ent{
			{dir("etc/"), file("etc/passwd", "root"), dir("etc/ssl/"), file("etc/ssl/cert", "c")},
			{{name: "etc/", typ: tar.TypeDir, mode: 0o711, uid: 5}, file("etc/group", "g")},
		},
		want: []want{
			{path: "/etc", typ: "directory", perm: 0o711, uid: 5, children: []string{"group", "passwd", "ssl"}},
			{path: "/etc/ssl/cert", body: str("c")},
		},
	}, {
		name: "whiteouts of absent names and AUFS metadata are ignored",
		layers: [][]ent{
			{file("a", "a")},
			{whiteout(".wh.nothing"), whiteout("nodir/.wh.x"), whiteout(".wh..wh.plnk"), whiteout(".wh..wh.aufs")},
		},
		want: []want{
			{path: "/", children: []string{"a", "lost+found"}},
			{path: "/nodir", absent: true},
		},
	}, {
		name: "file replaced by directory and directory replaced by file",
		layers: [][]ent{
			{file("f", "was a file"), dir("d/"), file("d/child", "c")},
			{dir("f/"), file("f/inner", "in"), file("d", "now a file")},
		},
		want: []want{
			{path: "/f", typ: "directory", children: []string{"inner"}},
			{path: "/f/inner", body: str("in")},
			{path: "/d", typ: "regular", body: str("now a file"), links: 1},
			{path: "/d/child", absent: true},
		},
	}, {
		name: "hard links within a layer and to a lower layer",
		layers: [][]ent{
			{dir("bin/"), {name: "bin/a", body: "prog", mode: 0o755}, hardlink("bin/b", "bin/a")},
			{hardlink("bin/c", "./bin/a"), hardlink("usr/bin/d", "/bin/b")},
		},
		want: []want{
			{path: "/bin/a", typ: "regular", links: 4, body: str("prog"), perm: 0o755},
			{path: "/bin/b", sameAs: "/bin/a", links: 4},
			{path: "/bin/c", sameAs: "/bin/a", links: 4},
			{path: "/usr/bin/d", sameAs: "/bin/a", links: 4, body: str("prog")},
			{path: "/usr", typ: "directory", perm: 0o755},
		},
	}, {
		name: "hard link target whited out later",
		layers: [][]ent{
			{dir("t/"), {name: "t/orig", body: "content", mode: 0o640, uid: 7, gid: 8}, hardlink("t/l1", "t/orig"), hardlink("t/l2", "t/orig")},
			{whiteout("t/.wh.orig")},
		},
		want: []want{
			{path: "/t/orig", absent: true},
			{path: "/t/l1", typ: "regular", body: str("content"), links: 2, perm: 0o640, uid: 7, gid: 8},
			{path: "/t/l2", sameAs: "/t/l1", links: 2, body: str("content"), uid: 7, gid: 8},
		},
	}, {
		name: "hard link target replaced later",
		layers: [][]ent{
			{file("orig", "old"), hardlink("l", "orig")},
			{file("orig", "new")},
		},
		want: []want{
			{path: "/orig", body: str("new"), links: 1},
			{path: "/l", body: str("old"), links: 1},
		},
	}, {
		name: "symlinks",
		layers: [][]ent{{
			symlink("short", "/etc/hostname"), symlink("rel", "../x"), symlink("long", longTarget),
			hardlink("short2", "short"),
		}},
		want: []want{
			{path: "/short", typ: "symlink", linkDest: "/etc/hostname", links: 2},
			{path: "/short2", sameAs: "/short"},
			{path: "/rel", typ: "symlink", linkDest: "../x"},
			{path: "/long", typ: "symlink", body: nil},
		},
	}, {
		name: "devices and fifo",
		layers: [][]ent{{
			dir("dev/"),
			{name: "dev/null", typ: tar.TypeChar, mode: 0o666, major: 1, minor: 3},
			{name: "dev/loop0", typ: tar.TypeBlock, mode: 0o660, major: 7, minor: 0, gid: 6},
			{name: "dev/fifo", typ: tar.TypeFifo, mode: 0o600},
		}},
		want: []want{
			{path: "/dev/null", typ: "character special", perm: 0o666, dev: "01:03"},
			{path: "/dev/loop0", typ: "block special", perm: 0o660, dev: "07:00", gid: 6},
			{path: "/dev/fifo", typ: "FIFO", perm: 0o600},
		},
	}, {
		name: "owner, setuid and sticky modes",
		layers: [][]ent{{
			{name: "home/user/", typ: tar.TypeDir, mode: 0o750, uid: 1000, gid: 1000},
			{name: "home/user/su", body: "x", mode: 0o4755, uid: 1000, gid: 1000},
			{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
			{name: "sg", body: "y", mode: 0o2711},
		}},
		want: []want{
			{path: "/home/user", typ: "directory", perm: 0o750, uid: 1000, gid: 1000},
			{path: "/home/user/su", typ: "regular", perm: 0o4755, uid: 1000, gid: 1000},
			{path: "/tmp", perm: 0o1777},
			{path: "/sg", perm: 0o2711},
			{path: "/home", typ: "directory", perm: 0o755, uid: 0},
		},
	}, {
		name: "xattrs",
		layers: [][]ent{{
			{name: "f", body: "x", mode: 0o644, xattrs: map[string]string{"user.foo": "bar"}},
			{name: "d/", typ: tar.TypeDir, mode: 0o755, xattrs: map[string]string{"user.dir": "yes"}},
		}},
		want: []want{
			{path: "/f", xattr: [2]string{"user.foo", "bar"}},
			{path: "/d", xattr: [2]string{"user.dir", "yes"}},
		},
	}, {
		name: "hostile paths stay inside the root",
		layers: [][]ent{{
			file("../../etc/evil", "evil"),
			file("a/../../evil2", "evil"),
			hardlink("escape", "../../etc/passwd"),
			file("/abs/ok", "ok"),
			file("./dot/../fine", "fine"),
			symlink("up", "../../.."),
		}, {
			// Never resolved through a symlink: the entry replaces it.
			file("up/evil3", "evil"),
		}},
		want: []want{
			{path: "/", children: []string{"abs", "fine", "lost+found", "up"}},
			{path: "/up", typ: "directory", children: []string{"evil3"}},
			{path: "/etc/evil", absent: true},
			{path: "/abs/ok", body: str("ok")},
			{path: "/fine", body: str("fine")},
		},
	}, {
		name:   "no layers",
		layers: nil,
		want:   []want{{path: "/", children: []string{"lost+found"}}},
	}}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := buildImage(t, openers(t, tc.layers...))
			e2fsckClean(t, img)
			for _, w := range tc.want {
				checkWant(t, img, w)
			}
		})
	}
}

func checkWant(t *testing.T, img string, w want) {
	t.Helper()
	n, ok := stat(t, img, w.path)
	if w.absent {
		if ok {
			t.Errorf("%s: present (inode %d), want absent", w.path, n.num)
		}
		return
	}
	if !ok {
		t.Errorf("%s: not found", w.path)
		return
	}
	if w.typ != "" && n.typ != w.typ {
		t.Errorf("%s: type %q, want %q", w.path, n.typ, w.typ)
	}
	if w.perm != 0 && n.perm != w.perm {
		t.Errorf("%s: mode %04o, want %04o", w.path, n.perm, w.perm)
	}
	if n.uid != w.uid || n.gid != w.gid {
		t.Errorf("%s: owner %d:%d, want %d:%d", w.path, n.uid, n.gid, w.uid, w.gid)
	}
	if w.links != 0 && n.links != w.links {
		t.Errorf("%s: %d links, want %d", w.path, n.links, w.links)
	}
	if w.linkDest != "" && n.linkDest != w.linkDest {
		t.Errorf("%s: symlink to %q, want %q", w.path, n.linkDest, w.linkDest)
	}
	if w.dev != "" && n.dev != w.dev {
		t.Errorf("%s: device %s, want %s", w.path, n.dev, w.dev)
	}
	if w.body != nil {
		if got := cat(t, img, w.path, n.size); got != *w.body {
			t.Errorf("%s: content %.40q (%d bytes), want %.40q (%d bytes)", w.path, got, len(got), *w.body, len(*w.body))
		}
	}
	if w.children != nil {
		if got := children(t, img, w.path); !slices.Equal(got, w.children) {
			t.Errorf("%s: children %q, want %q", w.path, got, w.children)
		}
	}
	if w.sameAs != "" {
		if o, ok := stat(t, img, w.sameAs); !ok || o.num != n.num {
			t.Errorf("%s: inode %d, want the inode of %s (%d)", w.path, n.num, w.sameAs, o.num)
		}
	}
	if w.xattr[0] != "" {
		out, errOut := debugfs(t, img, "ea_get "+w.path+" "+w.xattr[0])
		if !strings.Contains(out, fmt.Sprintf("%s (%d) = %q", w.xattr[0], len(w.xattr[1]), w.xattr[1])) {
			t.Errorf("%s: xattr %s = %q (%s), want %q", w.path, w.xattr[0], out, strings.TrimSpace(errOut), w.xattr[1])
		}
	}
}

func TestLongSymlink(t *testing.T) {
	// debugfs shows only fast (in-inode) link targets, so check the slow one
	// by reading the link's data block.
	findTool(t, "debugfs")
	target := "/" + strings.Repeat("long/", 20) + "target"
	img := buildImage(t, openers(t, []ent{symlink("long", target)}))
	n, ok := stat(t, img, "/long")
	if !ok || n.typ != "symlink" || n.size != int64(len(target)) {
		t.Fatalf("/long: %+v, want a symlink of size %d", n, len(target))
	}
	if got := cat(t, img, "/long", n.size); got != target {
		t.Errorf("/long points to %q, want %q", got, target)
	}
}

func TestCleanName(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"./", "", true},
		{"/", "", true},
		{".", "", true},
		{"a/b/", "a/b", true},
		{"./a//b/./c", "a/b/c", true},
		{"/etc/passwd", "etc/passwd", true},
		{"a/../b", "b", true},
		{"../x", "", false},
		{"../../etc/evil", "", false},
		{"a/../../x", "", false},
		{"/../x", "", false},
		{"..", "", false},
		{"", "", false},
		{"..foo", "..foo", true},
	}
	for _, tc := range tests {
		got, ok := cleanName(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("cleanName(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestEnsureBaseOnceConcurrently(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var opens atomic.Int32
	b := layerTar(t, []ent{file("f", "x")})
	id := "sha256:" + strings.Repeat("01", 32)
	final, err := s.basePath(id)
	if err != nil {
		t.Fatal(err)
	}
	layers := []LayerOpener{func() (io.ReadCloser, error) {
		if opens.Add(1) == 1 {
			// Hold the build until the other caller waits for it, so the
			// two really overlap. The bound only keeps a broken lock from
			// hanging the run; the open count below then fails the test.
			giveUp := time.Now().Add(30 * time.Second)
			for waiters := 0; waiters < 2 && time.Now().Before(giveUp); time.Sleep(time.Millisecond) {
				s.locks.mu.Lock()
				if l := s.locks.locks[final]; l != nil {
					waiters = l.refs
				}
				s.locks.mu.Unlock()
			}
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}}
	var wg sync.WaitGroup
	paths := make([]string, 2)
	errs := make([]error, 2)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = s.EnsureBase(context.Background(), id, layers) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if paths[0] != paths[1] {
		t.Errorf("callers got %q and %q", paths[0], paths[1])
	}
	// Two passes over one layer: one build.
	if n := opens.Load(); n != 2 {
		t.Errorf("layer opened %d times, want 2 (one build)", n)
	}
	again, err := s.EnsureBase(context.Background(), id, layers)
	if err != nil || again != paths[0] {
		t.Fatalf("second EnsureBase = %q, %v", again, err)
	}
	if n := opens.Load(); n != 2 {
		t.Errorf("existing base rebuilt: layer opened %d times", n)
	}
	if fi, err := os.Stat(paths[0]); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("base: %v, %v; want mode 0444", fi, err)
	}
	if !strings.HasSuffix(paths[0], "sha256-"+strings.Repeat("01", 32)+".ext4") {
		t.Errorf("base path %s does not name the image", paths[0])
	}
}

// failAfter yields n bytes of r and then fails.
type failAfter struct {
	r io.Reader
	n int
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("disk on fire")
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

func TestEnsureBaseFailureLeavesNothing(t *testing.T) {
	good := layerTar(t, []ent{file("f", strings.Repeat("x", 100000))})
	tests := []struct {
		name   string
		ctx    func() context.Context
		layers []LayerOpener
	}{{
		name:   "opener fails",
		ctx:    context.Background,
		layers: []LayerOpener{func() (io.ReadCloser, error) { return nil, errors.New("blob missing") }},
	}, {
		name: "second pass fails mid-stream",
		ctx:  context.Background,
		layers: func() []LayerOpener {
			var calls atomic.Int32
			return []LayerOpener{func() (io.ReadCloser, error) {
				if calls.Add(1) == 1 {
					return io.NopCloser(bytes.NewReader(good)), nil
				}
				return io.NopCloser(&failAfter{r: bytes.NewReader(good), n: 50000}), nil
			}}
		}(),
	}, {
		name: "layer changes between passes",
		ctx:  context.Background,
		layers: func() []LayerOpener {
			var calls atomic.Int32
			other := layerTar(t, []ent{file("g", "y")})
			return []LayerOpener{func() (io.ReadCloser, error) {
				if calls.Add(1) == 1 {
					return io.NopCloser(bytes.NewReader(good)), nil
				}
				return io.NopCloser(bytes.NewReader(other)), nil
			}}
		}(),
	}, {
		name:   "hard link to a missing target",
		ctx:    context.Background,
		layers: openers(t, []ent{hardlink("l", "nowhere")}),
	}, {
		name: "cancelled",
		ctx: func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		},
		layers: openers(t, []ent{file("f", "x")}),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := New(dir)
			if err != nil {
				t.Fatal(err)
			}
			p, err := s.EnsureBase(tc.ctx(), "sha256:"+strings.Repeat("cd", 32), tc.layers)
			if err == nil {
				t.Fatalf("EnsureBase succeeded (%s), want an error", p)
			}
			ents, _ := os.ReadDir(filepath.Join(dir, "bases"))
			for _, e := range ents {
				t.Errorf("left behind %s after %v", e.Name(), err)
			}
		})
	}
}

func TestBaseIDs(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "abc", "sha256:xyz", "sha256:../../etc", "md5:" + strings.Repeat("a", 32), strings.Repeat("a", 64)} {
		if _, err := s.EnsureBase(context.Background(), id, nil); !errdefs.IsInvalidArgument(err) {
			t.Errorf("EnsureBase(%q): %v, want invalid argument", id, err)
		}
		if err := s.RemoveBase(id); !errdefs.IsInvalidArgument(err) {
			t.Errorf("RemoveBase(%q): %v, want invalid argument", id, err)
		}
	}
}

func TestRemoveBase(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id := "sha256:" + strings.Repeat("ef", 32)
	if err := s.RemoveBase(id); err != nil {
		t.Fatalf("removing an absent base: %v", err)
	}
	p, err := s.EnsureBase(context.Background(), id, openers(t, []ent{file("f", "x")}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveBase(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("base still there after RemoveBase: %v", err)
	}
}

func TestNewRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(dir); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "bases", "sha256-00.ext4"+tmpInfix+"123")
	if err := os.WriteFile(stale, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file survived New: %v", err)
	}
}

// TestNewRemovesOldTemplates: upper templates of another templateVersion
// go when the store opens; the current one and other files stay.
func TestNewRemovesOldTemplates(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(dir); err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{ // name: kept
		"upper-v1-17179869184.ext4":                      false,
		"upper-v2-8589934592.ext4":                       false,
		"upper-" + templateVersion + "-17179869184.ext4": true,
		"other.ext4": true,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, "templates", name), nil, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(dir); err != nil {
		t.Fatal(err)
	}
	for name, kept := range files {
		_, err := os.Stat(filepath.Join(dir, "templates", name))
		if got := err == nil; got != kept {
			t.Errorf("%s: kept = %t, want %t (%v)", name, got, kept, err)
		}
	}
}

func TestNewUpper(t *testing.T) {
	findTool(t, "mkfs.ext4")
	findTool(t, "e2fsck")
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const size = 8 << 30
	dir := t.TempDir()
	for i := range 2 { // the second one comes from the existing template
		p := filepath.Join(dir, fmt.Sprintf("upper%d.ext4", i))
		if err := s.NewUpper(context.Background(), p, size); err != nil {
			t.Fatalf("NewUpper: %v", err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != size {
			t.Errorf("apparent size %d, want %d", fi.Size(), size)
		}
		used := diskUsage(t, p)
		// Every create copies and syncs this much: no zeroed journal, inode
		// tables or reserved group descriptors.
		if used > 1<<20 {
			t.Errorf("upper uses %d bytes on disk, want a sparse file with under 1 MiB of data", used)
		}
		e2fsckClean(t, p)
		out, _ := debugfs(t, p, "stats")
		if !strings.Contains(out, "has_journal") {
			t.Errorf("upper has no journal:\n%s", out)
		}
		// The overlay's directories, as the guest agent would make them.
		for _, d := range []string{UpperDir, proto.UpperWorkDir} {
			out, _ := debugfs(t, p, "stat /"+d)
			if !strings.Contains(out, "Type: directory    Mode:  0755") || !strings.Contains(out, "User:     0   Group:     0") {
				t.Errorf("/%s of the upper:\n%s", d, out)
			}
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("upper dir holds %d files, want 2 (no temporaries)", len(entries))
	}
	err = s.NewUpper(context.Background(), filepath.Join(dir, "upper0.ext4"), size)
	if !errdefs.IsAlreadyExists(err) {
		t.Errorf("NewUpper over an existing disk: %v, want already exists", err)
	}
	if err := s.NewUpper(context.Background(), filepath.Join(dir, "tiny"), 1<<20); !errdefs.IsInvalidArgument(err) {
		t.Errorf("NewUpper of 1 MiB: %v, want invalid argument", err)
	}
}

func TestSparseCopy(t *testing.T) {
	dir := t.TempDir()
	src, err := os.Create(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	const size = 64 << 20
	chunks := map[int64]string{0: "head", 5 << 20: "middle", size - 4096: "tail"}
	for off, s := range chunks {
		if _, err := src.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	// A written run of zeros must stay a hole in the copy.
	if _, err := src.WriteAt(make([]byte, 4<<20), 10<<20); err != nil {
		t.Fatal(err)
	}
	if err := src.Truncate(size); err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := sparseCopy(context.Background(), dst, src, size); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst.Name())
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(src.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("copy differs from source")
	}
	if used := diskUsage(t, dst.Name()); used > 1<<20 {
		t.Errorf("copy uses %d bytes on disk, want < 1 MiB", used)
	}
}

// diskUsage is the space a file really occupies.
func diskUsage(t testing.TB, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// busyboxLayer is a layer of about 5 MB shaped like a small distro: the
// static busybox, a symlink per applet, and a few hundred small files.
func busyboxLayer(b *testing.B) []byte {
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		b.Skipf("no /bin/busybox to build a realistic layer: %v", err)
	}
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		b.Skipf("busybox --list: %v", err)
	}
	ents := []ent{dir("bin/"), {name: "bin/busybox", body: string(bin), mode: 0o755}, dir("etc/"), dir("usr/share/doc/")}
	for applet := range strings.FieldsSeq(string(list)) {
		if applet != "busybox" {
			ents = append(ents, symlink("bin/"+applet, "busybox"))
		}
	}
	for i := range 900 {
		ents = append(ents, file(fmt.Sprintf("usr/share/doc/f%03d", i), strings.Repeat(fmt.Sprintf("line %d of some text\n", i), 1+i%250)))
	}
	return layerTar(b, ents)
}

func BenchmarkBusyboxBase(b *testing.B) {
	layer := busyboxLayer(b)
	layers := []LayerOpener{func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil }}
	b.SetBytes(int64(len(layer)))
	dir := b.TempDir()
	s, err := New(dir)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		p, err := s.EnsureBase(context.Background(), fmt.Sprintf("sha256:%064x", i), layers)
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			fi, _ := os.Stat(p)
			b.Logf("layer %d bytes -> base %d bytes", len(layer), fi.Size())
		}
	}
}

func BenchmarkUpperFromTemplate(b *testing.B) {
	findTool(b, "mkfs.ext4")
	s, err := New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := s.NewUpper(context.Background(), filepath.Join(dir, "warm"), 8<<30); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		if err := s.NewUpper(context.Background(), filepath.Join(dir, strconv.Itoa(i)), 8<<30); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpperMkfs is the alternative NewUpper does not take: formatting
// every upper, published the same way (fsync, link, directory sync).
func BenchmarkUpperMkfs(b *testing.B) {
	findTool(b, "mkfs.ext4")
	dir := b.TempDir()
	for i := 0; b.Loop(); i++ {
		err := createExclusive(filepath.Join(dir, strconv.Itoa(i)), 0o600, func(f *os.File) error {
			if err := f.Truncate(8 << 30); err != nil {
				return err
			}
			return mkfsExt4(context.Background(), f.Name())
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
