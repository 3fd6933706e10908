package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
	"github.com/husk-vm/husk/runtime/containers"
)

// minimalQEMUEnv names the QEMU `make qemu` builds; `make test` builds it
// and sets this.
const minimalQEMUEnv = "HUSK_E2E_QEMU"

// vmmPID is the pid of the VMM that runs container name (a name or ID).
func vmmPID(t *testing.T, name string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.Pid}}", name)))
	if err != nil || pid <= 0 {
		t.Fatalf("State.Pid of %s = %d, %v", name, pid, err)
	}
	return pid
}

// vmmBinary is the executable of the VMM that runs container name.
func vmmBinary(t *testing.T, name string) string {
	t.Helper()
	pid := vmmPID(t, name)
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatalf("%s's VMM (pid %d): %v", name, pid, err)
	}
	return exe
}

// TestMinimalQEMU: huskd --qemu runs the QEMU `make qemu` builds, and
// snapshots move between it and Debian's binary both ways, because its
// machines have exactly Debian's devices (runtime/vmm/qemu/minimal): a
// checkpoint made under Debian's binary restores under the minimal one
// and counts on, one made under the minimal one restores under Debian's,
// and the image template Debian's binary made starts containers under
// the minimal one without falling back to a cold boot. Under the minimal
// one an idle sandbox gives back its translated code
// (--tcg-release-idle) and still runs what it is asked to.
func TestMinimalQEMU(t *testing.T) {
	requireHusk(t)
	if suite.VMM != "qemu" {
		t.Skip("the minimal QEMU replaces QEMU; this daemon runs " + suite.VMM)
	}
	p := os.Getenv(minimalQEMUEnv)
	if p == "" {
		t.Skip("no minimal QEMU: build one with `make qemu` and set " + minimalQEMUEnv + " to it (make test does both)")
	}
	minimal, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatalf("%s=%s: %v", minimalQEMUEnv, p, err)
	}
	img := pulled(t, testimages.Busybox)
	waitTemplate(t)
	waitImageTemplate(t, img, 0)

	name := containerName(t, "")
	mustDocker(t, "run", "-d", "--name", name, img, "sh", "-c", counterScript)
	debian := vmmBinary(t, name)
	if debian == minimal {
		t.Fatalf("the daemon without --qemu runs %s, the minimal QEMU", debian)
	}
	waitSteps(t, name, 3)
	// across checkpoints name, restarts the daemon with args, restores
	// name, and checks that it runs under want and counts on.
	across := func(checkpoint, args, want string) {
		t.Helper()
		mustDocker(t, "checkpoint", "create", name, checkpoint)
		at := steps(t, name)
		if err := control.do("restart-with" + args); err != nil {
			t.Fatalf("restart huskd with%q: %v", args, err)
		}
		mustDocker(t, "start", "--checkpoint", checkpoint, name)
		if got := vmmBinary(t, name); got != want {
			t.Errorf("restored by a daemon with%q, %s runs %s; want %s", args, name, got, want)
		}
		continuesFrom(t, name, waitSteps(t, name, len(at)+2), len(at), lastCount(at))
	}
	t.Cleanup(func() {
		if err := control.do("restart-with"); err != nil {
			t.Fatalf("restart huskd with Debian's QEMU: %v", err)
		}
	})
	// A short idle time, so the test need not wait out the default.
	across("under-debian", " --qemu "+p+" --tcg-release-idle 3s", minimal)

	// A start from the image's template, made by Debian's binary.
	fresh := containerName(t, "-fresh")
	id := strings.TrimSpace(mustDocker(t, "run", "-d", "--name", fresh, img, "sleep", "600"))
	if !restoredFrom(t, id, "image") {
		t.Errorf("%s did not start from the image's template under --qemu (%s)", fresh, suite.DaemonLog)
	}
	if got := vmmBinary(t, fresh); got != minimal {
		t.Errorf("started under --qemu, %s runs %s; want %s", fresh, got, minimal)
	}
	if got, want := strings.TrimSpace(mustDocker(t, "exec", fresh, "echo", "ok")), "ok"; got != want {
		t.Errorf("exec in %s = %q, want %q", fresh, got, want)
	}
	waitReleased(t, id)
	if got, want := strings.TrimSpace(mustDocker(t, "exec", fresh, "sh", "-c", "echo $((6 * 7))")), "42"; got != want {
		t.Errorf("exec in %s after the release = %q, want %q", fresh, got, want)
	}
	mustDocker(t, "rm", "-f", fresh)

	// A cold boot's QEMU gives back the kernel and initramfs it booted
	// from once the guest is up.
	cold := containerName(t, "-cold")
	mustDocker(t, "run", "-d", "--name", cold, "--label", containers.BootLabel+"=cold", img, "sleep", "600")
	coldPID := vmmPID(t, cold)
	eventually(t, cold+" gives back its boot images", func() string { return bootImagesReleased(coldPID) })
	if got, want := strings.TrimSpace(mustDocker(t, "exec", cold, "echo", "ok")), "ok"; got != want {
		t.Errorf("exec in %s = %q, want %q", cold, got, want)
	}
	mustDocker(t, "rm", "-f", cold)

	across("under-minimal", "", debian)
	mustDocker(t, "rm", "-f", name)
}

// waitReleased waits for container id, started from a template and
// idle, to have its QEMU drop its translated code and give the buffer's
// pages back (huskd --tcg-release-idle).
func waitReleased(t *testing.T, id string) {
	t.Helper()
	pid := vmmPID(t, id)
	eventually(t, id+" gives back its translated code when idle", func() string { return translationsReleased(pid, id) })
}

// translationsReleased says what is still missing for the QEMU (pid) of
// container id, started from a template, to have given back its
// translated code, or "" once it has. A restore flushes the empty buffer
// once and a start from it translates ~40,000 blocks (~20 MiB), which a
// 64 MiB buffer holds without another flush: a second flush with the
// buffer's memory down to what an idle guest translates is the release.
func translationsReleased(pid int, id string) string {
	const idleBufferMiB = 4
	m, err := vmmMemory(pid, 256<<20)
	if err != nil {
		return err.Error()
	}
	if m.TCGBufferMiB > idleBufferMiB {
		// Not yet; asking QEMU would also cost it CPU time, which it
		// must not use to count as idle.
		return fmt.Sprintf("%.1f MiB of translated code", m.TCGBufferMiB)
	}
	blocks, flushes, err := translatedBlocks(context.Background(), suite.DaemonRoot, id)
	if err != nil {
		return err.Error()
	}
	if flushes < 2 {
		return fmt.Sprintf("%d flushes, %d blocks in %.1f MiB of translated code", flushes, blocks, m.TCGBufferMiB)
	}
	return ""
}

// bootImagesReleased says what is still missing for QEMU pid, booted
// cold, to have given back the pages of the kernel and initramfs it
// booted from, or "" once it has. Only what a reset would read again
// could fault them back in.
func bootImagesReleased(pid int) string {
	const releasedKiB = 1024
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	images, rssKiB, err := bootImagesResident(f)
	switch {
	case err != nil:
		return err.Error()
	case images == 0:
		return "no kernel or initramfs mapped: not a cold boot through the kernel's PVH entry"
	case rssKiB > releasedKiB:
		return fmt.Sprintf("%d KiB of its boot images resident", rssKiB)
	}
	return ""
}

// bootImagesResident reads a QEMU's /proc/PID/smaps for its mappings of
// huskd's kernel cache (vmlinux-*, initramfs-*): how many, and how much
// of them is resident.
func bootImagesResident(r io.Reader) (images, rssKiB int, err error) {
	inImage := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if isSmapsHeader(fields) {
			inImage = false
			if len(fields) >= 6 {
				base := filepath.Base(fields[5])
				inImage = strings.HasPrefix(base, "vmlinux-") || strings.HasPrefix(base, "initramfs-")
			}
			if inImage {
				images++
			}
			continue
		}
		if inImage && len(fields) >= 2 && fields[0] == "Rss:" {
			kb, _ := strconv.Atoi(fields[1])
			rssKiB += kb
		}
	}
	return images, rssKiB, sc.Err()
}
