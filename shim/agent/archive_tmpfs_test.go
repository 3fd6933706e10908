//go:build linux

package agent_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// Archive operations look past the container's tmpfs mounts, as dockerd's
// do (they work on the root filesystem and volumes, not in the container's
// mount namespace): a file the container wrote to a tmpfs is not found, and
// a file copied in lands underneath, where the container does not see it.
// The tmpfs itself stays mounted for the container.
func TestArchiveDoesNotSeeTmpfs(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky", Mounts: []proto.MountSpec{
		{Type: proto.MountTmpfs, Target: "/scratch"},
	}}); err != nil {
		t.Fatal(err)
	}
	// The tmpfs is mounted in the test's own mount namespace; a shutdown
	// releases it, and a failed test must not leave it behind either.
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(f.root, "scratch"), unix.MNT_DETACH) })
	if r := run(t, c, "write", proto.ProcessSpec{Args: []string{"sh", "-c", "echo main > /scratch/f"}}); r.exit.Code != 0 {
		t.Fatalf("write into the tmpfs: %+v", r)
	}
	if _, err := c.ArchiveStat(ctx(t), "/scratch/f"); agentErrorKind(err) != proto.KindNotFound {
		t.Errorf("stat of a file in the tmpfs: %v, want not found", err)
	}
	if err := c.ArchivePut(ctx(t), proto.ArchiveSpec{Path: "/scratch"}, bytes.NewReader(tarOf(t, [2]string{"put", "copied\n"}))); err != nil {
		t.Fatalf("put into /scratch: %v", err)
	}
	_, rc, err := c.ArchiveGet(ctx(t), "/scratch/put")
	if err != nil {
		t.Fatalf("get /scratch/put: %v", err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Contains(b, []byte("copied\n")) {
		t.Errorf("get /scratch/put: %v %q", err, b)
	}
	r := run(t, c, "look", proto.ProcessSpec{Args: []string{"sh", "-c", "cat /scratch/f; ls /scratch"}})
	if want := "main\nf\n"; r.stdout != want || r.exit.Code != 0 {
		t.Errorf("the container's /scratch after the copies: %q (stderr %q), want %q", r.stdout, r.stderr, want)
	}
	// The agent, like the container, still sees the tmpfs.
	if _, err := os.Stat(filepath.Join(f.root, "scratch/f")); err != nil {
		t.Errorf("the tmpfs in the agent's view: %v", err)
	}
	if err := c.Shutdown(ctx(t)); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// Archive operations see the container's /etc/hostname, /etc/hosts and
// /etc/resolv.conf, as dockerd's do (they are among the mounts it sets up
// for them), not the empty mount points underneath; the binds stay in the
// helper's namespace.
func TestArchiveSeesEtcFiles(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "husky"}); err != nil {
		t.Fatal(err)
	}
	// The container's init makes the mount points the root lacks.
	if r := run(t, c, "start", proto.ProcessSpec{Args: []string{"sh", "-c", ":"}}); r.exit.Code != 0 {
		t.Fatalf("start: %+v", r)
	}
	for path, want := range map[string]string{"/etc/hostname": "husky\n", "/etc/hosts": "localhost"} {
		_, rc, err := c.ArchiveGet(ctx(t), path)
		if err != nil {
			t.Fatalf("get %s: %v", path, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Contains(b, []byte(want)) {
			t.Errorf("get %s: %v, an archive of %d bytes without %q", path, err, len(b), want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(f.root, "etc/hostname")); err != nil || len(b) != 0 {
		t.Errorf("the root's /etc/hostname in the agent's view: %q, %v; want the empty mount point", b, err)
	}
	if err := c.Shutdown(ctx(t)); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}
