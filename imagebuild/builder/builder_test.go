package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/registry"

	"github.com/husk-vm/husk/imagebuild"
	"github.com/husk-vm/husk/rootfs"
)

// file is one entry of a test tar.
type file struct {
	name, body, link string
	typ              byte
	mode             int64
	uid, gid         int
	mtime            int64 // Unix seconds; 0 is 1700000000
}

func makeTar(t *testing.T, files ...file) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		typ := f.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := f.mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		mtime := f.mtime
		if mtime == 0 {
			mtime = 1700000000
		}
		hdr := &tar.Header{Name: f.name, Typeflag: typ, Mode: mode, Uid: f.uid, Gid: f.gid, Linkname: f.link,
			Size: int64(len(f.body)), ModTime: time.Unix(mtime, 0)}
		if typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(f.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fakeVM stands in for a build VM: Run records the process and answers
// with the next scripted exit code and output; CutLayer returns the next
// scripted layer.
type fakeVM struct {
	t       *testing.T
	applied int
	runs    []Process
	codes   []int
	layers  [][]byte
	closed  bool
	put     []string // what PutFiles was given: "name uid:gid mode content"
}

func (f *fakeVM) ApplyLayer(ctx context.Context, r io.Reader) error {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	f.applied++
	return nil
}

func (f *fakeVM) Run(ctx context.Context, p Process, stdout, stderr io.Writer) (int, error) {
	f.runs = append(f.runs, p)
	fmt.Fprintf(stdout, "ran %s\n", p.Args[len(p.Args)-1])
	fmt.Fprintf(stderr, "warn\n")
	code := 0
	if len(f.codes) > 0 {
		code, f.codes = f.codes[0], f.codes[1:]
	}
	return code, nil
}

func (f *fakeVM) CutLayer(ctx context.Context, w io.Writer) error {
	if len(f.layers) == 0 {
		_, err := w.Write(makeTar(f.t))
		return err
	}
	l := f.layers[0]
	f.layers = f.layers[1:]
	_, err := w.Write(l)
	return err
}

func (f *fakeVM) Close(ctx context.Context) error { f.closed = true; return nil }

func (f *fakeVM) PutFiles(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(tr)
		f.put = append(f.put, fmt.Sprintf("%s %d:%d %o %s", h.Name, h.Uid, h.Gid, h.Mode, b))
	}
}

type fakeSandboxes struct {
	vms   []*fakeVM
	bases []string
	nets  []SandboxNetwork
	next  func() *fakeVM
}

func (f *fakeSandboxes) NewSandbox(ctx context.Context, base string, net SandboxNetwork) (Sandbox, error) {
	vm := f.next()
	f.vms = append(f.vms, vm)
	f.bases = append(f.bases, base)
	f.nets = append(f.nets, net)
	return vm, nil
}

type fixture struct {
	t      *testing.T
	images *imagebuild.Service
	b      *Builder
	vms    *fakeSandboxes
	baseID string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	images, err := imagebuild.New(imagebuild.Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	base := makeTar(t,
		file{name: "etc/", typ: tar.TypeDir},
		file{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"},
		file{name: "etc/group", body: "root:x:0:\nstaff:x:50:app\napp:x:1000:\n"},
		file{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		file{name: "bin/", typ: tar.TypeDir},
		file{name: "bin/sh", body: "#!shell", mode: 0o755},
		file{name: "link", typ: tar.TypeSymlink, link: "/tmp"},
	)
	layer, err := images.PutLayer(ctx, bytes.NewReader(base))
	if err != nil {
		t.Fatal(err)
	}
	cfg := v1.ConfigFile{Architecture: "amd64", OS: "linux", Config: v1.Config{Env: []string{"PATH=/bin"}, Cmd: []string{"sh"}},
		History: []v1.History{{CreatedBy: "base", Created: v1.Time{Time: time.Unix(1700000000, 0)}}}}
	id, err := images.CreateImage(ctx, cfg, []imagebuild.LayerInfo{layer}, "")
	if err != nil {
		t.Fatal(err)
	}
	images.ReleaseLayers(layer)
	if err := images.Tag(ctx, id, "base", "latest"); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, images: images, baseID: id, vms: &fakeSandboxes{}}
	f.vms.next = func() *fakeVM { return &fakeVM{t: t} }
	f.b, err = New(Options{Images: images, Sandboxes: f.vms, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// build runs a build and returns its stream text and result.
func (f *fixture) build(opts BuildOptions, ctxFiles ...file) (string, string, error) {
	f.t.Helper()
	opts.Context = bytes.NewReader(makeTar(f.t, ctxFiles...))
	if !opts.Remove {
		opts.Remove = true
	}
	var out strings.Builder
	var aux []string
	id, err := f.b.Build(context.Background(), opts, Output{Stream: func(s string) { out.WriteString(s) }, Aux: func(id string) { aux = append(aux, id) }})
	if err == nil && (len(aux) == 0 || aux[len(aux)-1] != id) {
		f.t.Errorf("aux IDs %v do not end with the result %s", aux, id)
	}
	return out.String(), id, err
}

// flattened is an image's layers merged into one tar.
func (f *fixture) flattened(id string) *tar.Reader {
	f.t.Helper()
	infos, err := f.images.LayerInfos(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	var openers []rootfs.LayerOpener
	for _, l := range infos {
		openers = append(openers, func() (io.ReadCloser, error) { return f.images.OpenLayer(l) })
	}
	var buf bytes.Buffer
	if err := rootfs.Flatten(context.Background(), &buf, openers); err != nil {
		f.t.Fatal(err)
	}
	return tar.NewReader(&buf)
}

// files flattens an image into name → content ("dir", "-> target" for
// links, "uid:gid mode" prefixed).
func (f *fixture) files(id string) map[string]string {
	f.t.Helper()
	out := map[string]string{}
	tr := f.flattened(id)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			f.t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		meta := fmt.Sprintf("%d:%d %o ", hdr.Uid, hdr.Gid, hdr.Mode)
		switch hdr.Typeflag {
		case tar.TypeDir:
			out[strings.TrimSuffix(hdr.Name, "/")] = meta + "dir"
		case tar.TypeSymlink:
			out[hdr.Name] = meta + "-> " + hdr.Linkname
		default:
			out[hdr.Name] = meta + string(b)
		}
	}
}

// modTimes flattens an image into name → modification time.
func (f *fixture) modTimes(id string) map[string]time.Time {
	f.t.Helper()
	out := map[string]time.Time{}
	tr := f.flattened(id)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return out
		}
		out[strings.TrimSuffix(hdr.Name, "/")] = hdr.ModTime
	}
}

// runCount is how many RUN processes the build VMs have run.
func (f *fixture) runCount() int {
	n := 0
	for _, vm := range f.vms.vms {
		n += len(vm.runs)
	}
	return n
}

func (f *fixture) config(id string) *imagebuild.Image {
	f.t.Helper()
	img, err := f.images.Resolve(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return img
}

func str(s string) *string { return &s }

const multiStage = `ARG BASE=base
FROM $BASE AS build
ARG MSG=hello
ENV A=1 B="two words"
WORKDIR /src
COPY a.txt ./
COPY sub/ /sub2/
RUN echo $MSG > /src/out && rm /etc/group
FROM $BASE
COPY --from=build --chown=app:staff /src/ /out/
USER app
EXPOSE 8080 53/udp
LABEL x=y
CMD ["cat","/out/out"]
`

var multiStageContext = []file{
	{name: "Dockerfile", body: multiStage},
	{name: "a.txt", body: "A\n"},
	{name: "sub/b.txt", body: "B\n"},
	{name: "sub/c/d.txt", body: "D\n", mode: 0o600},
	{name: "sub/ignored.txt", body: "x\n"},
	{name: ".dockerignore", body: "sub/ignored.txt\n"},
}

func TestMultiStageBuild(t *testing.T) {
	f := newFixture(t)
	runLayer := makeTar(t,
		file{name: "src/", typ: tar.TypeDir},
		file{name: "src/out", body: "bye\n"},
		file{name: "etc/", typ: tar.TypeDir},
		file{name: "etc/.wh.group"},
	)
	f.vms.next = func() *fakeVM { return &fakeVM{t: t, layers: [][]byte{runLayer}} }

	out, id, err := f.build(BuildOptions{BuildArgs: map[string]*string{"MSG": str("bye"), "UNUSED": str("x")}, Tags: []string{"built:1", "built:2"}}, multiStageContext...)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, want := range []string{
		"Step 1/14 : ARG BASE=base\n",
		"Step 2/14 : FROM $BASE AS build\n ---> " + shortID(f.baseID) + "\n",
		"Step 3/14 : ARG MSG=hello\n ---> Running in ",
		"Step 6/14 : COPY a.txt ./\n ---> ",
		"Step 8/14 : RUN echo $MSG > /src/out && rm /etc/group\n ---> Running in ",
		"ran echo $MSG > /src/out && rm /etc/group\n\x1b[91mwarn\n\x1b[0mRemoving intermediate container ",
		"Step 9/14 : FROM $BASE\n ---> " + shortID(f.baseID) + "\n",
		"[Warning] One or more build-args [UNUSED] were not consumed\n",
		"Successfully built " + shortID(id) + "\nSuccessfully tagged built:1\nSuccessfully tagged built:2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Step 6/14 : COPY a.txt ./\n ---> Running in") {
		t.Errorf("COPY reported a container:\n%s", out)
	}

	if len(f.vms.vms) != 1 || f.vms.bases[0] != f.baseID {
		t.Fatalf("VMs booted %d from %v, want one from the base", len(f.vms.vms), f.vms.bases)
	}
	vm := f.vms.vms[0]
	if !vm.closed {
		t.Error("the build VM was not closed")
	}
	// WORKDIR and the two COPYs made layers the VM had to get first.
	if vm.applied != 3 {
		t.Errorf("VM got %d layers applied, want 3 (WORKDIR, COPY, COPY)", vm.applied)
	}
	p := vm.runs[0]
	if p.Cwd != "/src" || strings.Join(p.Args, " ") != "/bin/sh -c echo $MSG > /src/out && rm /etc/group" {
		t.Errorf("RUN process = %+v", p)
	}
	if want := []string{"PATH=/bin", "A=1", "B=two words", "MSG=bye"}; strings.Join(p.Env, ",") != strings.Join(want, ",") {
		t.Errorf("RUN env = %q, want %q", p.Env, want)
	}

	img := f.config(id)
	c := img.Config.Config
	if c.User != "app" || c.Labels["x"] != "y" || strings.Join(c.Cmd, " ") != "cat /out/out" {
		t.Errorf("config = %+v", c)
	}
	ports := []string{}
	for p := range c.ExposedPorts {
		ports = append(ports, p)
	}
	sort.Strings(ports)
	if strings.Join(ports, " ") != "53/udp 8080/tcp" {
		t.Errorf("exposed ports = %v", ports)
	}
	if got := img.RepoTags; strings.Join(got, " ") != "built:1 built:2" {
		t.Errorf("tags = %v", got)
	}
	hist := img.Config.History
	if last := hist[len(hist)-1].CreatedBy; last != `/bin/sh -c #(nop)  CMD ["cat" "/out/out"]` {
		t.Errorf("last history line = %q", last)
	}
	files := f.files(id)
	for name, want := range map[string]string{
		"out":        "1000:50 755 dir",
		"out/out":    "1000:50 644 bye\n",
		"etc/group":  "0:0 644 root:x:0:\nstaff:x:50:app\napp:x:1000:\n",
		"tmp":        "0:0 1777 dir",
		"bin/sh":     "0:0 755 #!shell",
		"out/a.txt":  "1000:50 644 A\n",
		"out/../etc": "",
	} {
		if want == "" {
			continue
		}
		if files[name] != want {
			t.Errorf("final image %s = %q, want %q", name, files[name], want)
		}
	}

	// The build stage's image holds the RUN's deletion and the copies,
	// the .dockerignore'd file among them: a classic build leaves that to
	// the client, as dockerd's does.
	buildID := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, " ---> ") && !strings.Contains(line, "Running") && !strings.Contains(line, "cache") {
			buildID = strings.TrimPrefix(line, " ---> ")
		}
		if strings.HasPrefix(line, "Step 9/14") {
			break
		}
	}
	bfiles := f.files(buildID)
	if _, ok := bfiles["etc/group"]; ok {
		t.Error("the RUN's deletion of /etc/group did not reach the stage's image")
	}
	for name, want := range map[string]string{
		"src/a.txt":        "0:0 644 A\n",
		"sub2/b.txt":       "0:0 644 B\n",
		"sub2/c/d.txt":     "0:0 600 D\n",
		"src/out":          "0:0 644 bye\n",
		"sub2/ignored.txt": "0:0 644 x\n",
	} {
		if files := bfiles[name]; files != want {
			t.Errorf("build stage %s = %q, want %q", name, files, want)
		}
	}

	// Again: every step from the cache, no VM, the same image.
	out2, id2, err := f.build(BuildOptions{BuildArgs: map[string]*string{"MSG": str("bye")}}, multiStageContext...)
	if err != nil {
		t.Fatalf("rebuild: %v\n%s", err, out2)
	}
	if id2 != id || len(f.vms.vms) != 1 || strings.Contains(out2, "Running in") {
		t.Errorf("rebuild = %s (first %s), %d VMs, output:\n%s", id2, id, len(f.vms.vms), out2)
	}
	if n := strings.Count(out2, " ---> Using cache\n"); n != 11 {
		t.Errorf("rebuild used the cache %d times, want 11:\n%s", n, out2)
	}

	// Another build arg value: the RUN (and what follows) runs again.
	out3, _, err := f.build(BuildOptions{BuildArgs: map[string]*string{"MSG": str("other")}}, multiStageContext...)
	if err != nil {
		t.Fatalf("rebuild with another arg: %v\n%s", err, out3)
	}
	if !strings.Contains(out3, "RUN echo $MSG > /src/out && rm /etc/group\n ---> Running in") {
		t.Errorf("a changed build arg was served from the cache:\n%s", out3)
	}
	if f.vms.vms[1].applied != 3 {
		t.Errorf("second VM got %d cached layers applied, want 3", f.vms.vms[1].applied)
	}

	// --no-cache runs everything.
	out4, _, err := f.build(BuildOptions{NoCache: true, BuildArgs: map[string]*string{"MSG": str("bye")}}, multiStageContext...)
	if err != nil || strings.Contains(out4, "Using cache") {
		t.Errorf("--no-cache build: %v\n%s", err, out4)
	}
}

func TestFailingRun(t *testing.T) {
	f := newFixture(t)
	f.vms.next = func() *fakeVM { return &fakeVM{t: t, codes: []int{7}} }
	out, _, err := f.build(BuildOptions{}, file{name: "Dockerfile", body: "FROM base\nRUN exit 7\n"})
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 7 || err.Error() != "The command '/bin/sh -c exit 7' returned a non-zero code: 7" {
		t.Fatalf("err = %v, want the exit 7 error", err)
	}
	if strings.Contains(out, "Removing intermediate container") {
		t.Errorf("a failed step's container was reported removed:\n%s", out)
	}
	if !f.vms.vms[0].closed {
		t.Error("the VM of the failed build was not closed")
	}
}

func TestRunNetwork(t *testing.T) {
	f := newFixture(t)
	want := SandboxNetwork{Mode: "mynet", ExtraHosts: []string{"foo:1.2.3.4"}}
	_, _, err := f.build(BuildOptions{Network: want}, file{name: "Dockerfile", body: "FROM base\nRUN true\n"})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.vms.nets) != 1 {
		t.Fatalf("%d build VMs, want one", len(f.vms.nets))
	}
	for i, got := range f.vms.nets {
		if got.Mode != want.Mode || !slices.Equal(got.ExtraHosts, want.ExtraHosts) {
			t.Errorf("build VM %d connected as %+v, want %+v", i, got, want)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, dockerfile, opt, want string
	}{
		{"unknown instruction", "FROM base\nFOO bar\n", "", "dockerfile parse error line 2: unknown instruction: FOO"},
		{"missing source", "FROM base\nCOPY nope /x\n", "", "COPY failed: file not found in build context or excluded by .dockerignore: stat nope: file does not exist"},
		{"copy url", "FROM base\nCOPY http://127.0.0.1:1/x /x\n", "", "COPY failed: source can't be a URL for COPY"},
		{"empty", "", "", "the Dockerfile (Dockerfile) cannot be empty"},
		{"comments only", "# nothing\n", "", "failed to parse Dockerfile: file with no instructions"},
		{"syntax", "FROM base\nLABEL x\n", "", "failed to parse Dockerfile: LABEL must have two arguments"},
		{"stage name", "FROM base AS a\nFROM base AS a\n", "", "a stage name already used"},
		{"instruction", "FROM base\nENV\n", "", "dockerfile parse error line 2: ENV requires at least one argument"},
		{"several sources", "FROM base\nCOPY a b /x\n", "", "When using COPY with more than one source file, the destination must be a directory and end with a /"},
		{"target", "FROM base\n", "nope", "failed to reach build target nope in Dockerfile"},
		{"chown", "FROM base\nCOPY --chown=ghost a /x\n", "", "unable to convert uid/gid chown string to host mapping: can't find uid for user ghost: no such user: ghost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := f.build(BuildOptions{Target: tc.opt},
				file{name: "Dockerfile", body: tc.dockerfile}, file{name: "a", body: "a"}, file{name: "b", body: "b"},
				file{name: "secret", body: "s"}, file{name: ".dockerignore", body: "secret\n"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestAddURL(t *testing.T) {
	lastModified := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	archive := makeTar(t, file{name: "inside", body: "x"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/files/r.txt":
			w.Header().Set("Last-Modified", lastModified.Format(http.TimeFormat))
			_, _ = io.WriteString(w, "remote\n")
		case "/files/pkg.tar":
			_, _ = w.Write(archive)
		case "/named/":
			w.Header().Set("Content-Disposition", `attachment; filename="../given.txt"`)
			_, _ = io.WriteString(w, "given\n")
		case "/anonymous/":
			_, _ = io.WriteString(w, "anonymous\n")
		default:
			http.Error(w, "no such file", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	f := newFixture(t)
	dockerfile := "FROM scratch\nADD --chown=5:6 " + srv.URL + "/files/r.txt /d/\n" +
		"ADD " + srv.URL + "/files/pkg.tar " + srv.URL + "/named/ /d/\n" +
		"ADD " + srv.URL + "/anonymous/ /anon\n"
	out, id, err := f.build(BuildOptions{}, file{name: "Dockerfile", body: dockerfile})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	files := f.files(id)
	for name, want := range map[string]string{
		"d/r.txt":     "5:6 600 remote\n",
		"d/pkg.tar":   "0:0 600 " + string(archive), // not extracted
		"d/given.txt": "0:0 600 given\n",
		"anon":        "0:0 600 anonymous\n",
	} {
		if files[name] != want {
			t.Errorf("%s = %q, want %q", name, files[name], want)
		}
	}
	if _, ok := files["d/inside"]; ok {
		t.Error("a downloaded archive was extracted")
	}
	if mt := f.modTimes(id)["d/r.txt"]; !mt.Equal(lastModified) {
		t.Errorf("downloaded file's mtime = %v, want its Last-Modified %v", mt, lastModified)
	}
	if h := f.config(id).Config.History; len(h) < 1 || !regexp.MustCompile(`^/bin/sh -c #\(nop\) ADD --chown=5:6[0-9a-f]{64} in /d/ $`).MatchString(h[0].CreatedBy) {
		t.Errorf("history of the download = %+v, want dockerd 20.10's ADD --chown=5:6<hash> in /d/", h)
	}

	for _, tc := range []struct{ name, add, want string }{
		{"not found", srv.URL + "/nope /x", "ADD failed: failed to GET " + srv.URL + "/nope with status 404 Not Found: no such file"},
		{"no name", srv.URL + "/anonymous/ /x/", "ADD failed: cannot determine filename for source " + srv.URL + "/anonymous/"},
		{"refused", "http://127.0.0.1:1/x /x", `ADD failed: Get "http://127.0.0.1:1/x": dial tcp 127.0.0.1:1: connect: connection refused`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := f.build(BuildOptions{}, file{name: "Dockerfile", body: "FROM scratch\nADD " + tc.add + "\n"})
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestAddExtractsLocalArchive(t *testing.T) {
	f := newFixture(t)
	archive := makeTar(t, file{name: "pkg/", typ: tar.TypeDir}, file{name: "pkg/lib.txt", body: "lib\n", uid: 5, gid: 6})
	out, id, err := f.build(BuildOptions{},
		file{name: "Dockerfile", body: "FROM scratch\nADD pkg.tar /opt/\nCOPY --chmod=600 a /a\nCOPY a /link/\nWORKDIR /w\n"},
		file{name: "pkg.tar", body: string(archive)}, file{name: "a", body: "a\n"})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Step 1/5 : FROM scratch\n ---> \n") {
		t.Errorf("scratch step output:\n%s", out)
	}
	files := f.files(id)
	for name, want := range map[string]string{
		"opt/pkg/lib.txt": "5:6 644 lib\n",
		"a":               "0:0 600 a\n",
		"link/a":          "0:0 644 a\n",
		"w":               "0:0 755 dir",
	} {
		if files[name] != want {
			t.Errorf("%s = %q, want %q", name, files[name], want)
		}
	}
	img := f.config(id)
	if env := img.Config.Config.Env; len(env) != 1 || env[0] != "PATH="+defaultPath {
		t.Errorf("scratch image env = %v, want the default PATH", env)
	}
}

// TestCopyFromKeepsOwners: COPY --from without --chown keeps the owners
// files have in their stage, as dockerd's classic builder does; the
// directories the copy makes are root's, and --chown still overrides.
func TestCopyFromKeepsOwners(t *testing.T) {
	f := newFixture(t)
	runLayer := makeTar(t,
		file{name: "src/", typ: tar.TypeDir, uid: 1000, gid: 50},
		file{name: "src/own", body: "o\n", uid: 1000, gid: 50},
		file{name: "src/root", body: "r\n"},
	)
	f.vms.next = func() *fakeVM { return &fakeVM{t: t, layers: [][]byte{runLayer}} }
	out, id, err := f.build(BuildOptions{}, file{name: "Dockerfile", body: "FROM scratch AS build\nRUN make\n" +
		"FROM scratch\nCOPY --from=build /src/ /out/\nCOPY --from=build /src/own /deep/dir/own\nCOPY --from=build --chown=7:8 /src/own /chowned\n"})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	files := f.files(id)
	for name, want := range map[string]string{
		"out":          "0:0 755 dir",
		"out/own":      "1000:50 644 o\n",
		"out/root":     "0:0 644 r\n",
		"deep/dir":     "0:0 755 dir",
		"deep/dir/own": "1000:50 644 o\n",
		"chowned":      "7:8 644 o\n",
	} {
		if files[name] != want {
			t.Errorf("%s = %q, want %q", name, files[name], want)
		}
	}
}

// TestCopyCacheIgnoresMtime: a COPY of the same files with other mtimes
// (a fresh checkout, a touch) comes from the cache, as in dockerd's
// classic builder; other contents or modes do not.
func TestCopyCacheIgnoresMtime(t *testing.T) {
	f := newFixture(t)
	dockerfile := file{name: "Dockerfile", body: "FROM scratch\nCOPY a /a\n"}
	_, first, err := f.build(BuildOptions{}, dockerfile, file{name: "a", body: "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what   string
		a      file
		cached bool
	}{
		{"touched", file{name: "a", body: "a\n", mtime: 1800000000}, true},
		{"changed", file{name: "a", body: "b\n", mtime: 1800000000}, false},
		{"chmodded", file{name: "a", body: "a\n", mode: 0o600}, false},
	} {
		out, id, err := f.build(BuildOptions{}, dockerfile, tc.a)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if cached := strings.Contains(out, " ---> Using cache\n"); cached != tc.cached || cached && id != first {
			t.Errorf("%s: from the cache %v (image %s, first %s), want %v:\n%s", tc.what, cached, id, first, tc.cached, out)
		}
	}
}

// TestCopyHistoryDest: a COPY's history names its destination as the
// Dockerfile wrote it, as dockerd's does, not the path it resolved to.
func TestCopyHistoryDest(t *testing.T) {
	f := newFixture(t)
	_, id, err := f.build(BuildOptions{}, file{name: "Dockerfile", body: "FROM scratch\nWORKDIR /w\nCOPY a .\n"}, file{name: "a", body: "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	h := f.config(id).Config.History
	if len(h) == 0 || !regexp.MustCompile(`^/bin/sh -c #\(nop\) COPY file:[0-9a-f]{64} in \. $`).MatchString(h[len(h)-1].CreatedBy) {
		t.Errorf("history = %+v, want the last step to be COPY file:<hash> in . ", h)
	}
}

// TestArgsEscapedCleared: dockerd's builder on Linux clears ArgsEscaped,
// a Windows notion, on CMD and ENTRYPOINT, whatever the base image said.
func TestArgsEscapedCleared(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	base := f.config(f.baseID)
	cfg := v1.ConfigFile{Architecture: "amd64", OS: "linux", Config: base.Config.Config, RootFS: base.Config.RootFS, History: base.Config.History}
	cfg.Config.ArgsEscaped = true
	infos, err := f.images.LayerInfos(ctx, f.baseID)
	if err != nil {
		t.Fatal(err)
	}
	escaped, err := f.images.CreateImage(ctx, cfg, infos, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"CMD echo hi", "ENTRYPOINT echo hi", `CMD ["echo", "hi"]`} {
		t.Run(step, func(t *testing.T) {
			_, id, err := f.build(BuildOptions{}, file{name: "Dockerfile", body: "FROM " + escaped + "\n" + step + "\n"})
			if err != nil {
				t.Fatal(err)
			}
			if f.config(id).Config.Config.ArgsEscaped {
				t.Errorf("ArgsEscaped still set after %s", step)
			}
		})
	}
}

// TestOnBuildOutput: the base's triggers run within FROM, so, as in
// dockerd's output, FROM's " ---> ID" comes after them and names the image
// they made.
func TestOnBuildOutput(t *testing.T) {
	f := newFixture(t)
	if _, _, err := f.build(BuildOptions{Tags: []string{"trig"}}, file{name: "Dockerfile", body: "FROM base\nONBUILD LABEL t=1\n"}); err != nil {
		t.Fatal(err)
	}
	out, id, err := f.build(BuildOptions{}, file{name: "Dockerfile", body: "FROM trig\nLABEL u=2\n"})
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`Step 1/2 : FROM trig\n# Executing 1 build trigger\n(?s:.*?) ---> ([0-9a-f]{12})\nStep 2/2 : LABEL u=2\n`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output:\n%s\nwant FROM, the trigger, then FROM's ---> ID", out)
	}
	if labels := f.config(id).Config.Config.Labels; labels["t"] != "1" || labels["u"] != "2" {
		t.Errorf("labels %v, want the trigger's and the step's", labels)
	}
	if m[1] == shortID(f.config("trig").ID) {
		t.Errorf("FROM's ---> names the base %s, not the image the trigger made", m[1])
	}
}

// recordedEvents records a build's intermediate-container events as
// "type action id-prefix attrs".
type recordedEvents struct{ got []string }

func (r *recordedEvents) IntermediateName() string { return "some_name" }

func (r *recordedEvents) ContainerEvent(action events.Action, id string, attrs map[string]string) {
	keys := slices.Sorted(maps.Keys(attrs))
	var kv []string
	for _, k := range keys {
		v := attrs[k]
		if k == "image" {
			v = "img"
		}
		kv = append(kv, k+"="+v)
	}
	r.got = append(r.got, fmt.Sprintf("container %s %s", action, strings.Join(kv, ",")))
}

func (r *recordedEvents) NetworkEvent(action events.Action, network, containerID string) {
	r.got = append(r.got, fmt.Sprintf("network %s %s", action, network))
}

// TestIntermediateEvents: the events dockerd's intermediate containers
// give: a RUN's whole run on the build's network, a metadata step's create
// and destroy, none for FROM, COPY or a cached step; a failed RUN's
// container is not destroyed.
func TestIntermediateEvents(t *testing.T) {
	f := newFixture(t)
	ev := &recordedEvents{}
	f.b.opts.Events = ev
	df := file{name: "Dockerfile", body: "FROM base\nRUN true\nLABEL a=b\nCOPY f /f\n"}
	if _, _, err := f.build(BuildOptions{Network: SandboxNetwork{Mode: "mynet"}}, df, file{name: "f", body: "x"}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"container create image=img,name=some_name",
		"container attach image=img,name=some_name",
		"network connect mynet",
		"container start image=img,name=some_name",
		"container die exitCode=0,image=img,name=some_name",
		"network disconnect mynet",
		"container destroy image=img,name=some_name",
		"container create a=b,image=img,name=some_name",
		"container destroy a=b,image=img,name=some_name",
	}
	if !slices.Equal(ev.got, want) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(ev.got, "\n"), strings.Join(want, "\n"))
	}

	ev.got = nil
	if _, _, err := f.build(BuildOptions{Network: SandboxNetwork{Mode: "mynet"}}, df, file{name: "f", body: "x"}); err != nil {
		t.Fatal(err)
	}
	if len(ev.got) != 0 {
		t.Errorf("a build from the cache gave events: %q", ev.got)
	}

	ev.got = nil
	f.vms.next = func() *fakeVM { return &fakeVM{t: t, codes: []int{7}} }
	if _, _, err := f.build(BuildOptions{}, file{name: "Dockerfile", body: "FROM base\nRUN exit 7\n"}); err == nil {
		t.Fatal("the failing RUN succeeded")
	}
	want = []string{
		"container create image=img,name=some_name",
		"container attach image=img,name=some_name",
		"network connect ",
		"container start image=img,name=some_name",
		"container die exitCode=7,image=img,name=some_name",
		"network disconnect ",
	}
	if !slices.Equal(ev.got, want) {
		t.Errorf("events of a failing RUN:\n%s\nwant:\n%s", strings.Join(ev.got, "\n"), strings.Join(want, "\n"))
	}
}

// A BuildKit client is told of steps and cache hits and gets the
// Dockerfile apart from the context; the classic stream's own lines stay
// out of what it is sent.
func TestStepOutput(t *testing.T) {
	f := newFixture(t)
	type step struct {
		instruction string
		cached      bool
	}
	build := func() ([]step, string) {
		var steps []step
		var out strings.Builder
		_, err := f.b.Build(context.Background(), BuildOptions{
			Context:           bytes.NewReader(makeTar(t, file{name: "a.txt", body: "A\n"})),
			DockerfileContent: []byte("FROM base\nCOPY a.txt /\nRUN true\n"),
			Tags:              []string{"stepped"},
			BuildKit:          true,
			BuildArgs:         map[string]*string{"BUILDKIT_INLINE_CACHE": str("1")},
			Remove:            true,
		}, Output{
			Stream: func(s string) { out.WriteString(s) },
			Step: func(stage string, n, total int, instruction string) {
				steps = append(steps, step{instruction: fmt.Sprintf("%q %d/%d %s", stage, n, total, instruction)})
			},
			Cached: func() { steps[len(steps)-1].cached = true },
		})
		if err != nil {
			t.Fatal(err)
		}
		return steps, out.String()
	}
	steps, out := build()
	if strings.Contains(out, "Warning") {
		t.Errorf("a BuildKit client was warned of an unused build arg:\n%s", out)
	}
	want := []step{{instruction: `"" 1/3 FROM base`}, {instruction: `"" 2/3 COPY a.txt /`}, {instruction: `"" 3/3 RUN true`}}
	if !slices.Equal(steps, want) {
		t.Errorf("steps = %v, want %v", steps, want)
	}
	if out != "ran true\nwarn\n" {
		t.Errorf("stream = %q, want the RUN's output alone, uncoloured", out)
	}
	steps, _ = build()
	want[1].cached, want[2].cached = true, true
	if !slices.Equal(steps, want) {
		t.Errorf("rebuild steps = %v, want %v", steps, want)
	}
}

// A FROM image that must be pulled takes its credentials from the
// client when X-Registry-Config had none for its registry.
func TestCredentialsAsked(t *testing.T) {
	f := newFixture(t)
	var asked []string
	_, _, err := f.build(BuildOptions{Credentials: func(_ context.Context, host string) (*registry.AuthConfig, error) {
		asked = append(asked, host)
		return nil, errors.New("no keys")
	}}, file{name: "Dockerfile", body: "FROM 127.0.0.1:1/nothing\n"})
	if err == nil || !strings.Contains(err.Error(), "credentials for 127.0.0.1:1: no keys") {
		t.Errorf("err = %v", err)
	}
	if !slices.Equal(asked, []string{"127.0.0.1:1"}) {
		t.Errorf("asked for %q", asked)
	}
}

// A feature only BuildKit has is refused in dockerd's words to a classic
// client and as husk's own limit to a BuildKit client.
func TestBuildKitOnlyFeatures(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, dockerfile, classic, buildKit string
	}{
		{"run mount ssh", "FROM base\nRUN --mount=type=ssh true\n",
			"the --mount option requires BuildKit. Refer to https://docs.docker.com/go/buildkit/ to learn how to build images with BuildKit enabled",
			"RUN --mount=type=ssh is not supported by husk's builder"},
		{"run network", "FROM base\nRUN --network=none true\n",
			"the --network option requires BuildKit. Refer to https://docs.docker.com/go/buildkit/ to learn how to build images with BuildKit enabled",
			"RUN --network is not supported by husk's builder"},
		{"copy parents", "FROM base\nCOPY --parents a /x\n",
			"the --link, --parents and --exclude options require BuildKit",
			"COPY --parents and --exclude is not supported by husk's builder"},
		{"add exclude", "FROM base\nADD --exclude=b a /x\n",
			"the --link, --exclude and --checksum options require BuildKit",
			"ADD --exclude is not supported by husk's builder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, buildKit := range []bool{false, true} {
				_, _, err := f.build(BuildOptions{BuildKit: buildKit}, file{name: "Dockerfile", body: tc.dockerfile}, file{name: "a", body: "a"})
				want, class := tc.classic, errdefs.IsInvalidArgument
				if buildKit {
					want, class = tc.buildKit, errdefs.IsNotImplemented
				}
				if err == nil || err.Error() != want || !class(err) {
					t.Errorf("BuildKit %v: err = %v (%T), want %q", buildKit, err, err, want)
				}
			}
		})
	}
}

// Heredocs, for a BuildKit client: a RUN that is one document runs its
// text, any other has its documents put back for the shell; COPY makes
// each document a file, expanded unless its delimiter is quoted.
func TestHeredocs(t *testing.T) {
	f := newFixture(t)
	df := "FROM base\nENV NAME=bob\n" +
		"RUN <<EOT\necho a\necho b\nEOT\n" +
		"RUN <<-EOT\n\techo tabbed\n\tEOT\n" +
		"RUN cat <<EOT > /x\nhello $NAME\nEOT\n" +
		"COPY <<EOT /greet\nhi $NAME\nEOT\n" +
		"COPY <<'EOT' <<EOF /docs/\n$NAME\nEOT\nsecond\nEOF\n"
	id, err := f.b.Build(context.Background(), BuildOptions{
		Context: bytes.NewReader(makeTar(t)), DockerfileContent: []byte(df), BuildKit: true, Remove: true,
	}, Output{})
	if err != nil {
		t.Fatal(err)
	}
	var scripts []string
	for _, p := range f.vms.vms[0].runs {
		scripts = append(scripts, strings.Join(p.Args, "|"))
	}
	want := []string{"/bin/sh|-c|echo a\necho b\n", "/bin/sh|-c|echo tabbed\n", "/bin/sh|-c|cat <<EOT > /x\nhello $NAME\nEOT"}
	if !slices.Equal(scripts, want) {
		t.Errorf("RUN scripts = %q, want %q", scripts, want)
	}
	files := f.files(id)
	for name, want := range map[string]string{"greet": "0:0 644 hi bob\n", "docs/EOT": "0:0 644 $NAME\n", "docs/EOF": "0:0 644 second\n"} {
		if files[name] != want {
			t.Errorf("%s = %q, want %q", name, files[name], want)
		}
	}

	_, err = f.b.Build(context.Background(), BuildOptions{
		Context: bytes.NewReader(makeTar(t)), DockerfileContent: []byte("FROM base\nRUN <<EOT\n#!/bin/sh\ntrue\nEOT\n"), BuildKit: true,
	}, Output{})
	if !errdefs.IsNotImplemented(err) || !strings.Contains(err.Error(), "starts with #!") {
		t.Errorf("shebang heredoc: err = %v", err)
	}
	// A classic client is told, in dockerd's words, to use BuildKit.
	for _, df := range []string{"FROM base\nRUN <<EOT\ntrue\nEOT\n", "FROM base\nCOPY <<EOT /x\nx\nEOT\n"} {
		_, _, err := f.build(BuildOptions{}, file{name: "Dockerfile", body: df})
		if want := "heredocs require BuildKit. Refer to https://docs.docker.com/go/buildkit/ to learn how to build images with BuildKit enabled"; err == nil || err.Error() != want {
			t.Errorf("classic %q: err = %v", df, err)
		}
	}
}

// A BuildKit client's build has BuildKit's platform ARGs: FROM may use
// them, and a stage has one that it declares.
func TestPlatformArgs(t *testing.T) {
	f := newFixture(t)
	df := "ARG TARGETOS\nFROM --platform=$BUILDPLATFORM base\nARG TARGETARCH BUILDPLATFORM\nRUN echo $TARGETARCH $BUILDPLATFORM\nRUN echo undeclared\n"
	_, err := f.b.Build(context.Background(), BuildOptions{
		Context: bytes.NewReader(makeTar(t)), DockerfileContent: []byte(df), BuildKit: true, Remove: true,
	}, Output{})
	if err != nil {
		t.Fatal(err)
	}
	runs := f.vms.vms[0].runs
	if len(runs) != 2 {
		t.Fatalf("%d runs", len(runs))
	}
	for _, want := range []string{"TARGETARCH=amd64", "BUILDPLATFORM=linux/amd64"} {
		if !slices.Contains(runs[0].Env, want) {
			t.Errorf("RUN env %q lacks %s", runs[0].Env, want)
		}
	}
	for _, kv := range runs[1].Env {
		if strings.HasPrefix(kv, "TARGETOS=") {
			t.Errorf("an undeclared platform ARG reached the stage: %s", kv)
		}
	}
	if got := platformArgs("linux/arm/v7"); got["TARGETARCH"] != "arm" || got["TARGETVARIANT"] != "v7" || got["BUILDARCH"] != "amd64" {
		t.Errorf("platformArgs(linux/arm/v7) = %v", got)
	}
}

// For a BuildKit client only the stages the target needs are built, as
// BuildKit does: a failing stage nothing uses does not fail the build.
func TestUnneededStagesSkipped(t *testing.T) {
	f := newFixture(t)
	df := "ARG SRC=deps\n" +
		"FROM base AS deps\nRUN echo deps\n" +
		"FROM base AS lint\nRUN exit 1\n" +
		"FROM base AS tool\nRUN echo tool\n" +
		"FROM base AS unused\nRUN exit 2\n" +
		"FROM base AS mounted\nRUN echo mounted\n" +
		"FROM ${SRC} AS mid\nRUN echo mid\n" +
		"FROM base\nCOPY --from=mid /etc/passwd /p\nCOPY --from=2 /etc/group /g\nRUN --mount=from=mounted,target=/m echo final\n"
	var steps []string
	_, err := f.b.Build(context.Background(), BuildOptions{
		Context: bytes.NewReader(makeTar(t)), DockerfileContent: []byte(df), BuildKit: true, Remove: true,
	}, Output{Step: func(stage string, n, total int, instruction string) {
		steps = append(steps, fmt.Sprintf("%s %d/%d %s", stage, n, total, instruction))
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"deps 1/2 FROM base AS deps", "deps 2/2 RUN echo deps", "tool 1/2 FROM base AS tool", "tool 2/2 RUN echo tool",
		"mounted 1/2 FROM base AS mounted", "mounted 2/2 RUN echo mounted",
		"mid 1/2 FROM ${SRC} AS mid", "mid 2/2 RUN echo mid",
		"stage-6 1/4 FROM base", "stage-6 2/4 COPY --from=mid /etc/passwd /p", "stage-6 3/4 COPY --from=2 /etc/group /g", "stage-6 4/4 RUN --mount=from=mounted,target=/m echo final"}
	if len(steps) < len(want) || !slices.Equal(steps[:len(want)], want) {
		t.Errorf("steps = %q, want %q", steps, want)
	}
	// A classic client builds every stage, as dockerd's classic builder.
	f.vms.next = func() *fakeVM { return &fakeVM{t: t, codes: []int{1}} }
	var exit *ExitError
	if _, _, err := f.build(BuildOptions{}, file{name: "Dockerfile", body: df}); !errors.As(err, &exit) || exit.Command != "/bin/sh -c exit 1" {
		t.Errorf("classic build: err = %v, want the lint stage's failure", err)
	}
}

// A BuildKit client's --label is set on the image, not added as LABEL
// steps, and the same labels on the same build give the same image.
func TestBuildKitLabels(t *testing.T) {
	f := newFixture(t)
	build := func() (string, []string) {
		var steps []string
		id, err := f.b.Build(context.Background(), BuildOptions{
			Context: bytes.NewReader(makeTar(t)), DockerfileContent: []byte("FROM base\nLABEL own=yes\n"),
			BuildKit: true, Remove: true, Labels: map[string]string{"com.example.a": "1", "own": "overridden"},
		}, Output{Step: func(_ string, _, _ int, instruction string) { steps = append(steps, instruction) }})
		if err != nil {
			t.Fatal(err)
		}
		return id, steps
	}
	id, steps := build()
	if want := []string{"FROM base", "LABEL own=yes"}; !slices.Equal(steps, want) {
		t.Errorf("steps = %q, want %q", steps, want)
	}
	img := f.config(id)
	if want := map[string]string{"com.example.a": "1", "own": "overridden"}; !maps.Equal(img.Config.Config.Labels, want) {
		t.Errorf("labels = %v, want %v", img.Config.Config.Labels, want)
	}
	for _, h := range img.Config.History {
		if strings.Contains(h.CreatedBy, "com.example.a") {
			t.Errorf("history has a step for the label: %q", h.CreatedBy)
		}
	}
	if again, _ := build(); again != id {
		t.Errorf("rebuild gave %s, want %s", again, id)
	}
}

// For a BuildKit client COPY --link is a plain copy and ADD --checksum
// checks the download, in BuildKit's words.
func TestLinkAndChecksum(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "remote\n")
	}))
	defer srv.Close()
	good := "sha256:" + fmt.Sprintf("%x", sha256.Sum256([]byte("remote\n")))
	bad := "sha256:" + strings.Repeat("0", 64)
	f := newFixture(t)
	build := func(df string) (string, error) {
		return f.b.Build(context.Background(), BuildOptions{
			Context: bytes.NewReader(makeTar(t, file{name: "a", body: "A\n"})), DockerfileContent: []byte(df), BuildKit: true, Remove: true,
		}, Output{})
	}
	id, err := build("FROM base\nCOPY --link a /a\nADD --link --checksum=" + good + " " + srv.URL + "/r.txt /r.txt\n")
	if err != nil {
		t.Fatal(err)
	}
	files := f.files(id)
	if files["a"] != "0:0 644 A\n" || files["r.txt"] != "0:0 600 remote\n" {
		t.Errorf("a = %q, r.txt = %q", files["a"], files["r.txt"])
	}
	for df, want := range map[string]string{
		"FROM base\nADD --checksum=" + bad + " " + srv.URL + "/r.txt /r.txt\n": "digest mismatch for " + srv.URL + "/r.txt: " + good + " (expected: " + bad + ")",
		"FROM base\nADD --checksum=" + good + " a /a\n":                        "checksum requires HTTP(S) or Git sources",
		"FROM base\nADD --checksum=" + good + " a a /d/\n":                     "checksum can't be specified for multiple sources",
	} {
		if _, err := build(df); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", df, err, want)
		}
	}
}

// For a BuildKit client RUN --mount=type=cache and type=tmpfs are empty
// mounts of the step's own (a cache that starts empty), relative targets
// under the working directory; the mounts tell steps apart in the cache.
func TestRunMounts(t *testing.T) {
	f := newFixture(t)
	build := func(df string) {
		t.Helper()
		if _, err := f.b.Build(context.Background(), BuildOptions{
			Context: bytes.NewReader(makeTar(t)), DockerfileContent: []byte(df), BuildKit: true, Remove: true,
		}, Output{}); err != nil {
			t.Fatal(err)
		}
	}
	df := "FROM base\nWORKDIR /w\nRUN --mount=type=cache,target=/root/.cache,uid=5,mode=0700 --mount=type=tmpfs,target=rel,size=1m true\n"
	build(df)
	vm := f.vms.vms[len(f.vms.vms)-1]
	want := []TmpfsMount{{Target: "/root/.cache", Mode: 0o700, UID: 5}, {Target: "/w/rel", Mode: 0o1777, Size: 1 << 20}}
	if len(vm.runs) != 1 || !slices.Equal(vm.runs[0].Tmpfs, want) {
		t.Fatalf("runs %+v, want one with mounts %+v", vm.runs, want)
	}
	build(df)
	if f.runCount() != 1 {
		t.Errorf("the same step ran again (%d runs)", f.runCount())
	}
	build(strings.Replace(df, "/root/.cache", "/var/cache", 1))
	if f.runCount() != 2 {
		t.Errorf("a step with another mount was taken from the cache (%d runs)", f.runCount())
	}
}

// For a BuildKit client RUN --mount=type=bind and type=secret put their
// files in the VM under the staging directory and bind them for the step
// alone; a bind's files are part of the cache key and a secret is not, as
// in BuildKit.
func TestRunMountsBindSecret(t *testing.T) {
	f := newFixture(t)
	secret := "s3"
	build := func(df, sub string) error {
		_, err := f.b.Build(context.Background(), BuildOptions{
			Context: bytes.NewReader(makeTar(t, file{name: "a.txt", body: "A\n"}, file{name: "sub/f", body: sub},
				file{name: "ignored", body: "x"}, file{name: ".dockerignore", body: "ignored\n"})),
			DockerfileContent: []byte(df), BuildKit: true, Remove: true,
			Secret: func(_ context.Context, id string) ([]byte, error) {
				if id == "tok" {
					return []byte(secret), nil
				}
				return nil, nil
			},
		}, Output{})
		return err
	}
	df := "FROM base\nWORKDIR /w\nRUN --mount=type=bind,source=sub,target=/src --mount=type=bind,source=a.txt,target=a.txt,rw " +
		"--mount=type=secret,id=tok --mount=type=secret,id=tok,env=TOKEN,target=/t --mount=type=secret,id=absent true\n"
	if err := build(df, "one\n"); err != nil {
		t.Fatal(err)
	}
	vm := f.vms.vms[len(f.vms.vms)-1]
	if len(vm.runs) != 1 {
		t.Fatalf("%d runs", len(vm.runs))
	}
	run := vm.runs[0]
	wantBinds := []BindMount{
		{Source: "/.husk-run-mounts/b0", Target: "/src", Dir: true, ReadOnly: true},
		{Source: "/.husk-run-mounts/b1", Target: "/w/a.txt"},
		{Source: "/.husk-run-mounts/s0", Target: "/run/secrets/tok", ReadOnly: true},
		{Source: "/.husk-run-mounts/s1", Target: "/t", ReadOnly: true},
	}
	if !slices.Equal(run.Binds, wantBinds) || run.Staged != "/.husk-run-mounts" {
		t.Errorf("binds %+v staged %q, want %+v", run.Binds, run.Staged, wantBinds)
	}
	if !slices.Contains(run.Env, "TOKEN=s3") {
		t.Errorf("env %q lacks TOKEN", run.Env)
	}
	for _, want := range []string{".husk-run-mounts/b0/f 0:0 644 one\n", ".husk-run-mounts/b1 0:0 644 A\n", ".husk-run-mounts/s0 0:0 400 s3", ".husk-run-mounts/s1 0:0 400 s3"} {
		if !slices.Contains(vm.put, want) {
			t.Errorf("put %q lacks %q", vm.put, want)
		}
	}
	secret = "rotated"
	if err := build(df, "one\n"); err != nil || f.runCount() != 1 {
		t.Errorf("a new secret ran the step again (%d runs, %v)", f.runCount(), err)
	}
	if err := build(df, "two\n"); err != nil || f.runCount() != 2 {
		t.Errorf("a bound file's change was taken from the cache (%d runs, %v)", f.runCount(), err)
	}
	for df, want := range map[string]string{
		"FROM base\nRUN --mount=type=secret,id=absent,required true\n":     "secret absent: not found",
		"FROM base\nRUN --mount=type=bind,source=nope,target=/x true\n":    `failed to compute cache key: "/nope" not found: not found`,
		"FROM base\nRUN --mount=type=bind,source=ignored,target=/x true\n": `failed to compute cache key: "/ignored" not found: not found`,
		"FROM base\nRUN --mount=type=ssh true\n":                           "RUN --mount=type=ssh is not supported by husk's builder",
	} {
		if err := build(df, "x"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", df, err, want)
		}
	}
}

// A classic build's tar context loses, as under dockerd, only
// .dockerignore and the Dockerfile where .dockerignore names them: the
// client left the rest out. BuildKit's frontend applies the whole file.
func TestIgnoreFileOfATarContext(t *testing.T) {
	files := []file{
		{name: "Dockerfile", body: "FROM base\nCOPY . /c/\n"}, {name: "secret", body: "s"}, {name: "kept", body: "k"},
		{name: ".dockerignore", body: "secret\n.dockerignore\nDockerfile\n"},
	}
	for _, tc := range []struct {
		buildKit bool
		want     []string
	}{
		{false, []string{"c/kept", "c/secret"}},
		{true, []string{"c/kept"}},
	} {
		f := newFixture(t)
		out, id, err := f.build(BuildOptions{BuildKit: tc.buildKit}, files...)
		if err != nil {
			t.Fatalf("BuildKit %v: %v\n%s", tc.buildKit, err, out)
		}
		var got []string
		for name := range f.files(id) {
			if strings.HasPrefix(name, "c/") && name != "c/" {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("BuildKit %v: the context copied %q, want %q", tc.buildKit, got, tc.want)
		}
	}
}

// A directory a BuildKit session filled gets no ignore file: the session
// has already applied the one that holds, which may be
// <Dockerfile>.dockerignore, and BuildKit then ignores the context's own.
func TestIgnoreFileOfADirectoryContext(t *testing.T) {
	files := []file{{name: "kept", body: "k"}, {name: ".dockerignore", body: "kept\n"}}
	df := "FROM base\nCOPY kept /x\n"
	f := newFixture(t)
	dir := t.TempDir()
	for _, fl := range files {
		if err := os.WriteFile(filepath.Join(dir, fl.name), []byte(fl.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.b.Build(context.Background(), BuildOptions{ContextDir: dir, DockerfileContent: []byte(df), BuildKit: true, Remove: true}, Output{}); err != nil {
		t.Errorf("a directory context's .dockerignore was applied again: %v", err)
	}
}

// A classic build leaves out of a RUN step's layer what it changed under a
// VOLUME, as dockerd's classic builder does, and runs the next step in a
// VM without those changes; the volume's missing mount point is made, and
// kept. A BuildKit build keeps the changes, as BuildKit does.
func TestRunChangesUnderVolumes(t *testing.T) {
	df := "FROM base\nVOLUME /vol\nRUN touch /vol/f /kept\nRUN true\n"
	runLayer := makeTar(t,
		file{name: "vol/", typ: tar.TypeDir},
		file{name: "vol/f", body: "in the volume"},
		file{name: "vol/.wh.old"},
		file{name: "kept", body: "outside"},
		file{name: "kept-link", typ: tar.TypeLink, link: "vol/f"},
	)
	for _, tt := range []struct {
		buildKit bool
		want     []string
		vms      int
	}{
		{false, []string{"kept", "vol"}, 2},
		{true, []string{"kept", "kept-link", "vol", "vol/f"}, 1},
	} {
		f := newFixture(t)
		f.vms.next = func() *fakeVM { return &fakeVM{t: t, layers: [][]byte{runLayer}} }
		_, id, err := f.build(BuildOptions{DockerfileContent: []byte(df), BuildKit: tt.buildKit})
		if err != nil {
			t.Fatalf("BuildKit %v: %v", tt.buildKit, err)
		}
		base := f.files(f.baseID)
		var got []string
		for name := range f.files(id) {
			if _, ok := base[name]; !ok {
				got = append(got, name)
			}
		}
		sort.Strings(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("BuildKit %v: the image adds %q, want %q", tt.buildKit, got, tt.want)
		}
		if len(f.vms.vms) != tt.vms {
			t.Errorf("BuildKit %v: %d build VMs, want %d", tt.buildKit, len(f.vms.vms), tt.vms)
		}
		if !f.vms.vms[0].closed {
			t.Errorf("BuildKit %v: the first build VM was left open", tt.buildKit)
		}
		var wantPut []string
		if !tt.buildKit {
			wantPut = []string{"vol/ 0:0 755 "}
		}
		if got := f.vms.vms[0].put; !slices.Equal(got, wantPut) {
			t.Errorf("BuildKit %v: put %q in the VM, want %q", tt.buildKit, got, wantPut)
		}
	}
}

func TestVolumeChangesLeftOut(t *testing.T) {
	v := &volumeChanges{volumes: []string{"vol", "data/db"}, created: map[string]bool{"data/db": true}}
	for _, tt := range []struct {
		name string
		typ  byte
		want bool
	}{
		{"vol/f", tar.TypeReg, true},
		{"./vol/sub/", tar.TypeDir, true},
		{"vol/.wh.gone", tar.TypeReg, true},
		{"vol/.wh..wh..opq", tar.TypeReg, true},
		{".wh.vol", tar.TypeReg, true},
		{"vol/", tar.TypeDir, true}, // an existing volume's own changes
		{"data/db/", tar.TypeDir, false},
		{"data/", tar.TypeDir, false},
		{"data/.wh.db", tar.TypeReg, true},
		{"volume2/f", tar.TypeReg, false},
		{"etc/.wh.group", tar.TypeReg, false},
	} {
		if got := v.leftOut(&tar.Header{Name: tt.name, Typeflag: tt.typ}); got != tt.want {
			t.Errorf("leftOut(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
