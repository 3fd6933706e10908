package e2e

import (
	"archive/tar"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/husk-vm/husk/e2e/harness"
	"github.com/husk-vm/husk/e2e/testimages"
)

// hostFile reads a file the guest wrote and returns its content and owner.
func hostFile(t *testing.T, path string) (content string, uid, gid int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the guest's file is not on the host: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	return string(b), int(sys.Uid), int(sys.Gid)
}

// sharesLeft lists virtiofsd processes the daemon left running.
func sharesLeft(t *testing.T) []string {
	t.Helper()
	procs, err := harness.ProcessesMentioning(filepath.Dir(suite.DaemonLog))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range procs {
		if strings.Contains(p.Cmdline, "virtiofsd") {
			left = append(left, p.Cmdline)
		}
	}
	return left
}

// TestBindMounts: a host directory read-write and read-only, a single host
// file, and a tmpfs, in one container.
func TestBindMounts(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	rw, ro := t.TempDir(), t.TempDir()
	for _, d := range []string{rw, ro} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rw, "in"), []byte("from-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "keep"), []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "app.conf")
	if err := os.WriteFile(conf, []byte("conf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `cat /w/in; echo guest > /w/out; mkdir /w/owned && chown 1000:50 /w/owned && chmod 0710 /w/owned; ` +
		`touch /r/nope 2>&1 | sed 's/^.*: //'; rm /r/keep 2>&1 | sed 's/^.*: //'; ` +
		`cat /etc/app.conf; (echo changed > /etc/app.conf) 2>&1 | sed 's/^.*: //'; ` +
		`grep -o ' /scratch tmpfs [^ ]*' /proc/mounts | grep -o 'nosuid,nodev,noexec'; stat -c %a /scratch`
	r := docker(t, "run", "--rm", "-v", rw+":/w", "-v", ro+":/r:ro", "-v", conf+":/etc/app.conf:ro",
		"--mount", "type=tmpfs,dst=/scratch,tmpfs-mode=1770", img, "sh", "-c", script)
	want := "from-host\nRead-only file system\nRead-only file system\nconf\nRead-only file system\nnosuid,nodev,noexec\n1770\n"
	if r != (result{Stdout: want}) {
		t.Errorf("got %+v, want stdout %q", r, want)
	}
	if content, uid, gid := hostFile(t, filepath.Join(rw, "out")); content != "guest\n" || uid != 0 || gid != 0 {
		t.Errorf("file written by the guest's root: %q owned %d:%d, want \"guest\\n\" owned 0:0", content, uid, gid)
	}
	if st, err := os.Stat(filepath.Join(rw, "owned")); err != nil {
		t.Errorf("directory made by the guest: %v", err)
	} else if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1000 || sys.Gid != 50 || st.Mode().Perm() != 0o710 {
		t.Errorf("guest chown 1000:50 chmod 0710 shows on the host as %d:%d %o", sys.Uid, sys.Gid, st.Mode().Perm())
	}
	if entries, _ := os.ReadDir(ro); len(entries) != 1 {
		t.Errorf("the read-only directory changed: %v", entries)
	}
	if content, _, _ := hostFile(t, conf); content != "conf\n" {
		t.Errorf("the read-only file changed: %q", content)
	}
	if left := sharesLeft(t); len(left) > 0 {
		t.Errorf("virtiofsd still running after run --rm: %q", left)
	}

	// --mount refuses a missing source; -v creates it, as dockerd does.
	missing := filepath.Join(t.TempDir(), "missing")
	r = docker(t, "run", "--rm", "--mount", "type=bind,src="+missing+",dst=/x", img, "true")
	wantErr := "docker: Error response from daemon: invalid mount config for type \"bind\": bind source path does not exist: " + missing + "\n\nRun 'docker run --help' for more information\n"
	if r != (result{Stderr: wantErr, Code: 125}) {
		t.Errorf("--mount of a missing source: %+v, want %q", r, wantErr)
	}
	r = docker(t, "run", "--rm", "-v", "v1:relative", img, "true")
	wantErr = "docker: Error response from daemon: invalid volume specification: 'v1:relative': invalid mount config for type \"volume\": invalid mount path: 'relative' mount path must be absolute\n\nRun 'docker run --help' for more information\n"
	if r != (result{Stderr: wantErr, Code: 125}) {
		t.Errorf("relative destination: %+v, want %q", r, wantErr)
	}
}

type volumeInspected struct {
	Name, Driver, Mountpoint, Scope string
	Labels                          map[string]string
}

// TestNamedVolumes: create, fill from the image, outlive the container,
// refuse removal while in use, and go with ls/inspect/rm/prune; then an
// image's anonymous volume, removed by rm -v.
func TestNamedVolumes(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Volume)
	vol := namePrefix(t)
	t.Cleanup(func() { docker(t, "volume", "rm", "-f", vol) })
	if got := mustDocker(t, "volume", "create", "--label", "e2e=yes", vol); got != vol+"\n" {
		t.Errorf("volume create printed %q", got)
	}
	var vi []volumeInspected
	if err := json.Unmarshal([]byte(mustDocker(t, "volume", "inspect", vol)), &vi); err != nil || len(vi) != 1 {
		t.Fatalf("volume inspect: %v", err)
	}
	if v := vi[0]; v.Name != vol || v.Driver != "local" || v.Scope != "local" || v.Labels["e2e"] != "yes" {
		t.Errorf("volume inspect: %+v", v)
	}
	mountpoint := vi[0].Mountpoint

	// The empty volume gets the image's /data (owner, mode, content).
	writer := containerName(t, "-writer")
	r := docker(t, "run", "--name", writer, "-v", vol+":/data", img, "sh", "-c",
		`stat -c '%u:%g %a' /data; cat /data/seed; stat -c '%u %a' /data/seed; echo kept > /data/kept`)
	if want := "1000:1000 750\nseed\n0 640\n"; r != (result{Stdout: want}) {
		t.Errorf("first use of the volume: %+v, want stdout %q", r, want)
	}
	if content, uid, _ := hostFile(t, filepath.Join(mountpoint, "kept")); content != "kept\n" || uid != 0 {
		t.Errorf("volume file on the host: %q uid %d", content, uid)
	}
	id := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", writer))
	r = docker(t, "volume", "rm", vol)
	wantErr := "Error response from daemon: remove " + vol + ": volume is in use - [" + id + "]\n"
	if r != (result{Stderr: wantErr, Code: 1}) {
		t.Errorf("volume rm in use: %+v, want %q", r, wantErr)
	}
	var mounts []struct{ Type, Name, Destination, Driver, Mode string }
	if err := json.Unmarshal([]byte(mustDocker(t, "inspect", "-f", "{{json .Mounts}}", writer)), &mounts); err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 1 || mounts[0].Type != "volume" || mounts[0].Name != vol || mounts[0].Destination != "/data" || mounts[0].Mode != "z" {
		t.Errorf("inspect Mounts: %+v", mounts)
	}
	mustDocker(t, "rm", writer)

	// A new container as another user sees the data, and what it writes
	// is owned by that uid on the host.
	r = docker(t, "run", "--rm", "-u", "1000", "-v", vol+":/data", img, "sh", "-c", "cat /data/kept; echo app > /data/by-app")
	if r != (result{Stdout: "kept\n"}) {
		t.Errorf("second container: %+v, want stdout \"kept\\n\"", r)
	}
	if _, uid, gid := hostFile(t, filepath.Join(mountpoint, "by-app")); uid != 1000 || gid != 1000 {
		t.Errorf("file written by uid 1000 is owned %d:%d on the host", uid, gid)
	}

	// An image's VOLUME gets an anonymous volume; rm -v removes it.
	anon := containerName(t, "-anon")
	mustDocker(t, "create", "--name", anon, img)
	anonVol := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{range .Mounts}}{{.Name}}{{end}}", anon))
	if len(anonVol) != 64 {
		t.Fatalf("anonymous volume name %q", anonVol)
	}
	if got := mustDocker(t, "volume", "ls", "-q", "-f", "dangling=true", "-f", "name="+anonVol); got != "" {
		t.Errorf("an in-use anonymous volume is listed as dangling: %q", got)
	}
	mustDocker(t, "rm", "-v", anon)
	if got := mustDocker(t, "volume", "ls", "-q", "-f", "name="+anonVol); got != "" {
		t.Errorf("rm -v left the anonymous volume: %q", got)
	}

	if got := mustDocker(t, "volume", "ls", "-q", "-f", "dangling=true", "-f", "label=e2e=yes"); got != vol+"\n" {
		t.Errorf("volume ls dangling: %q", got)
	}
	r = docker(t, "volume", "rm", vol)
	if r != (result{Stdout: vol + "\n"}) {
		t.Errorf("volume rm: %+v", r)
	}
	if _, err := os.Stat(mountpoint); !os.IsNotExist(err) {
		t.Errorf("volume data left after rm: %v", err)
	}
	r = docker(t, "volume", "inspect", vol)
	if r != (result{Stdout: "[]\n", Stderr: "Error response from daemon: get " + vol + ": no such volume\n", Code: 1}) {
		t.Errorf("inspect of a removed volume: %+v", r)
	}
}

// TestVolumePrune: prune takes unused anonymous volumes, and named ones
// only with --all.
func TestVolumePrune(t *testing.T) {
	s := requireSuite(t)
	if s.Kind != harness.Huskd {
		t.Skip("dockerd 20.10 (API 1.41) prunes named volumes without --all")
	}
	img := pulled(t, testimages.Volume)
	named := namePrefix(t)
	t.Cleanup(func() { docker(t, "volume", "rm", "-f", named) })
	mustDocker(t, "volume", "create", named)
	ctr := containerName(t, "")
	mustDocker(t, "create", "--name", ctr, img)
	anonVol := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{range .Mounts}}{{.Name}}{{end}}", ctr))
	mustDocker(t, "rm", ctr)
	out := mustDocker(t, "volume", "prune", "-f")
	if !strings.Contains(out, anonVol) || strings.Contains(out, named) {
		t.Errorf("volume prune: %q, want the anonymous volume only", out)
	}
	out = mustDocker(t, "volume", "prune", "-af", "--filter", "label!=nothing")
	if !strings.Contains(out, named) {
		t.Errorf("volume prune --all: %q, want %s", out, named)
	}
}

// TestVolumeSurvivesDaemonCrash: virtiofsd outlives a kill -9 of the
// daemon with its VM, and goes with the container.
func TestVolumeSurvivesDaemonCrash(t *testing.T) {
	s := requireSuite(t)
	if s.Kind != harness.Huskd {
		t.Skip("dockerd's live-restore is off; this is about husk's VMs outliving it")
	}
	img := pulled(t, testimages.Busybox)
	dir := t.TempDir()
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, "-v", dir+":/w", img, "sh", "-c",
		`i=0; while :; do i=$((i+1)); echo $i > /w/n.tmp; mv /w/n.tmp /w/n; sleep 1; done`)
	counter := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "n"))
		return strings.TrimSpace(string(b))
	}
	eventually(t, "the container writes to the bind mount", func() string {
		if counter() == "" {
			return "no counter yet"
		}
		return ""
	})
	crashDaemon(t)
	before := counter()
	eventually(t, "the container still writes after the daemon crash", func() string {
		if c := counter(); c == before {
			return "counter still " + c
		}
		return ""
	})
	if got := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Running}}", name)); got != "true" {
		t.Errorf("running after the crash: %s", got)
	}
	mustDocker(t, "rm", "-f", name)
	if left := sharesLeft(t); len(left) > 0 {
		t.Errorf("virtiofsd still running after rm -f: %q", left)
	}
}

// TestSocketBindMount: the daemon's own socket bind-mounted into a
// container, as testcontainers' Ryuk and docker-in-docker tools do, with
// the docker CLI beside it. From inside, the CLI reaches the daemon: it
// lists the container itself, runs a sibling container (a hijacked attach
// that half-closes stdin) and makes several connections at once. On huskd
// the guest's socket is the agent's, each connection carried to the host
// socket.
func TestSocketBindMount(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	sock, ok := strings.CutPrefix(suite.DockerHost, "unix://")
	if !ok {
		t.Fatalf("daemon host %q is not a unix socket", suite.DockerHost)
	}
	cli, err := filepath.Abs(suite.DockerCLI)
	if err != nil {
		t.Fatal(err)
	}
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, "-v", sock+":/var/run/docker.sock", "-v", cli+":/usr/local/bin/docker:ro", img, "sleep", "1000")
	script := `test -S /var/run/docker.sock && echo socket; ` +
		`docker ps --filter name=^` + name + `$ --format '{{.Names}} {{.State}}'; ` +
		`echo sibling | docker run --rm -i ` + img + ` cat; ` +
		`for i in 1 2 3; do docker version --format '{{.Server.Os}}' > /tmp/v$i & done; wait; cat /tmp/v1 /tmp/v2 /tmp/v3`
	want := "socket\n" + name + " running\nsibling\nlinux\nlinux\nlinux\n"
	if got := mustDocker(t, "exec", name, "sh", "-c", script); got != want {
		t.Errorf("docker inside the container printed %q, want %q", got, want)
	}
	// docker cp of the directory holding the socket leaves the socket
	// out (tar has no type for it).
	var names []string
	tr := tar.NewReader(strings.NewReader(mustDocker(t, "cp", name+":/var/run", "-")))
	for {
		h, err := tr.Next()
		if err != nil {
			if err != io.EOF {
				t.Errorf("docker cp of /var/run: %v", err)
			}
			break
		}
		names = append(names, h.Name)
	}
	if !slices.Equal(names, []string{"run/"}) {
		t.Errorf("docker cp of /var/run holds %q, want only run/", names)
	}
	mustDocker(t, "rm", "-f", name)
}

// mountedVolume reports whether the volume's directory is a mount point
// on the host, whatever the daemon's root.
func mountedVolume(t *testing.T, name string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), "/volumes/"+name+"/_data ") || strings.Contains(string(b), "/"+name+"/_data ")
}

// TestVolumeMountOptions: the local driver's mount options, as compose's
// driver_opts give them. A bind volume's content is its device's, on the
// host, and stays there when the volume goes; a tmpfs volume is a tmpfs
// of the size asked; a device that is not there fails the start in
// dockerd's words. Nothing stays mounted once the volumes are gone.
func TestVolumeMountOptions(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "seed"), []byte("from-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bound, tmp, missing := namePrefix(t)+"-bind", namePrefix(t)+"-tmpfs", namePrefix(t)+"-missing"
	t.Cleanup(func() { docker(t, "volume", "rm", "-f", bound, tmp, missing) })

	mustDocker(t, "volume", "create", "-o", "type=none", "-o", "o=bind", "-o", "device="+dir, bound)
	if got, want := mustDocker(t, "volume", "inspect", "-f", "{{json .Options}}", bound), `{"device":"`+dir+`","o":"bind","type":"none"}`+"\n"; got != want {
		t.Errorf("volume inspect Options = %s, want %s", got, want)
	}
	if out := mustDocker(t, "run", "--rm", "-v", bound+":/data", img, "sh", "-c", "cat /data/seed; echo from-guest > /data/out"); out != "from-host\n" {
		t.Errorf("the container read %q from the bind volume, want the device's from-host", out)
	}
	if content, _, _ := hostFile(t, filepath.Join(dir, "out")); content != "from-guest\n" {
		t.Errorf("the device holds %q, want what the container wrote", content)
	}
	mustDocker(t, "volume", "rm", bound)
	if mountedVolume(t, bound) {
		t.Errorf("%s is still mounted after volume rm", bound)
	}
	for _, f := range []string{"seed", "out"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("removing the volume took its device's %s: %v", f, err)
		}
	}

	mustDocker(t, "volume", "create", "-o", "type=tmpfs", "-o", "device=tmpfs", "-o", "o=size=1m", tmp)
	if out := mustDocker(t, "run", "--rm", "-v", tmp+":/t", img, "sh", "-c", "df -k /t | tail -n 1 | awk '{print $2}'"); out != "1024\n" {
		t.Errorf("the tmpfs volume's size is %q KiB, want 1024", out)
	}
	// As dockerd's local driver, the tmpfs is mounted while a container
	// using it runs: the containers running share it, the last one to
	// stop unmounts it (though both remain), and a start finds it empty.
	first, second := namePrefix(t)+"-first", namePrefix(t)+"-second"
	t.Cleanup(func() { docker(t, "rm", "-f", first, second) })
	mustDocker(t, "run", "-d", "--name", first, "-v", tmp+":/t", img, "sleep", "600")
	mustDocker(t, "exec", first, "touch", "/t/kept")
	mustDocker(t, "run", "-d", "--name", second, "-v", tmp+":/t", img, "sleep", "600")
	if out := mustDocker(t, "exec", second, "ls", "/t"); out != "kept\n" {
		t.Errorf("a second container running finds %q in the tmpfs volume, want the first's file", out)
	}
	mustDocker(t, "stop", "-t", "1", first)
	if !mountedVolume(t, tmp) {
		t.Errorf("%s was unmounted when %s stopped, while %s runs with it", tmp, first, second)
	}
	mustDocker(t, "stop", "-t", "1", second)
	if mountedVolume(t, tmp) {
		t.Errorf("%s is still mounted once no container using it runs", tmp)
	}
	mustDocker(t, "start", first)
	if out := mustDocker(t, "exec", first, "ls", "-A", "/t"); out != "" {
		t.Errorf("a restarted container finds %q in the tmpfs volume, want it empty as under dockerd", out)
	}
	if suite.Kind == harness.Huskd {
		// A daemon that crashes and comes back finds the container still
		// running with the volume mounted, keeps it so, and unmounts it
		// when that container stops.
		mustDocker(t, "exec", first, "touch", "/t/kept")
		crashDaemon(t)
		if out := mustDocker(t, "exec", first, "ls", "/t"); out != "kept\n" || !mountedVolume(t, tmp) {
			t.Errorf("after a daemon crash the running container finds %q in the tmpfs volume (mounted: %v), want its file", out, mountedVolume(t, tmp))
		}
		mustDocker(t, "stop", "-t", "1", first)
		if mountedVolume(t, tmp) {
			t.Errorf("%s is still mounted once the container that survived the daemon's crash stopped", tmp)
		}
		// One whose VM dies while no daemon runs has its volume unmounted
		// by the next daemon.
		mustDocker(t, "start", first)
		pid, id := vmmPID(t, first), strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", first))
		start := killDaemon(t)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s's VMM: %v", first, err)
		}
		eventually(t, "the VMM gone", func() string {
			if left, err := harness.ProcessesMentioning("process=husk-" + id[:12]); err != nil || len(left) > 0 {
				return "it still runs"
			}
			return ""
		})
		start()
		if mountedVolume(t, tmp) {
			t.Errorf("%s is still mounted after a restart found the only container using it stopped", tmp)
		}
	}
	mustDocker(t, "rm", "-f", first, second)

	mustDocker(t, "volume", "rm", tmp)
	if mountedVolume(t, tmp) {
		t.Errorf("%s is still mounted after volume rm", tmp)
	}

	// --mount's volume-opt and volume-label make the volume the run
	// creates: here an anonymous 1 MiB tmpfs, and a labelled named one.
	if out := mustDocker(t, "run", "--rm", "--mount", "type=volume,dst=/x,volume-opt=type=tmpfs,volume-opt=device=tmpfs,volume-opt=o=size=1m",
		img, "sh", "-c", "df -k /x | tail -n 1 | awk '{print $2}'"); out != "1024\n" {
		t.Errorf("--mount volume-opt: the volume's size is %q KiB, want a 1024 KiB tmpfs", out)
	}
	labelled := namePrefix(t) + "-labelled"
	t.Cleanup(func() { docker(t, "volume", "rm", "-f", labelled) })
	mustDocker(t, "run", "--rm", "--mount", "type=volume,src="+labelled+",dst=/x,volume-label=made=by-mount", img, "true")
	if out := mustDocker(t, "volume", "inspect", "-f", "{{json .Labels}}", labelled); out != `{"made":"by-mount"}`+"\n" {
		t.Errorf("--mount volume-label: the volume's labels are %s", out)
	}

	mustDocker(t, "volume", "create", "-o", "type=none", "-o", "o=bind", "-o", "device=/nonexistent-husk-e2e", missing)
	r := docker(t, "run", "--rm", "-v", missing+":/x", img, "true")
	// 127: the CLI takes "no such file or directory" for a missing command.
	if r.Code != 127 || !strings.Contains(r.Stderr, "failed to mount local volume: mount /nonexistent-husk-e2e:") {
		t.Errorf("a start with a missing device: %+v, want exit 127 and dockerd's mount error", r)
	}
	if r := docker(t, "volume", "create", "-o", "type=tmpfs", namePrefix(t)+"-nodevice"); r.Code != 1 || !strings.Contains(r.Stderr, `missing required option: "device"`) {
		t.Errorf("a type without a device: %+v, want dockerd's refusal", r)
	}
}

// TestVolumeSubpath: --mount's volume-subpath mounts a directory of the
// volume, following symlinks that stay inside it, filling it from the image
// as it would the whole volume; one that is missing or leads out of the
// volume fails the start and leaves nothing behind.
func TestVolumeSubpath(t *testing.T) {
	s := requireSuite(t)
	if s.Kind != harness.Huskd {
		t.Skip("the reference dockerd 20.10 predates volume subpaths (API 1.45) and ignores them")
	}
	img := pulled(t, testimages.Busybox)
	vol := namePrefix(t)
	t.Cleanup(func() { docker(t, "volume", "rm", "-f", vol) })
	mustDocker(t, "volume", "create", vol)
	mustDocker(t, "run", "--rm", "-v", vol+":/v", img, "sh", "-c",
		"mkdir -p /v/a/b /v/empty && echo in-b > /v/a/b/f && ln -s a/b /v/in && ln -s /etc /v/out")
	sub := func(p string) string { return "type=volume,src=" + vol + ",dst=/d,volume-subpath=" + p }
	if got := mustDocker(t, "run", "--rm", "--mount", sub("a/b"), img, "sh", "-c", "ls /d; echo new > /d/g"); got != "f\n" {
		t.Errorf("subpath a/b lists %q, want its one file", got)
	}
	if got := mustDocker(t, "run", "--rm", "--mount", sub("in"), img, "cat", "/d/f", "/d/g"); got != "in-b\nnew\n" {
		t.Errorf("subpath through a symlink inside the volume reads %q", got)
	}
	// Filled from the image's /bin on first use, as a whole volume would be.
	if got := mustDocker(t, "run", "--rm", "--mount", "type=volume,src="+vol+",dst=/bin,volume-subpath=empty", img, "/bin/sh", "-c", "test -x /bin/ls && echo filled"); got != "filled\n" {
		t.Errorf("empty subpath over /bin: %q, want it filled from the image", got)
	}
	if got := mustDocker(t, "run", "--rm", "-v", vol+":/v", img, "sh", "-c", "test -x /v/empty/ls && echo copied"); got != "copied\n" {
		t.Errorf("the copy-up did not land in the subpath: %q", got)
	}
	for _, tc := range []struct{ subpath, want string }{
		{"out", "path concatenation escapes the base directory"},
		{"nope", "cannot access path "},
		{"../x", `invalid mount config for type "volume": subpath must be a relative path within the volume`},
	} {
		r := docker(t, "run", "--rm", "--mount", sub(tc.subpath), img, "true")
		if r.Code == 0 || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("subpath %s: %+v, want an error with %q", tc.subpath, r, tc.want)
		}
	}
	if left := sharesLeft(t); len(left) != 0 {
		t.Errorf("virtiofsd left running: %v", left)
	}
	if got := mustDocker(t, "ps", "-aq", "--filter", "volume="+vol); got != "" {
		t.Errorf("containers left using the volume: %q", got)
	}
}
