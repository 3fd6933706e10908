package rootfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/husk-vm/husk/shim/proto"
)

// UpperDir is the directory, relative to the root of an upper disk, that
// the guest mounts as the overlay's upper layer; NewUpper formats it in.
const UpperDir = proto.UpperLayerDir

// UpperUsage measures a container's writable layer on its upper disk
// without booting anything: the sum of the apparent sizes of the files
// under the disk's UpperDir, each inode counted once and directories not
// at all. That is how dockerd sizes a container's writable layer (SizeRw),
// so `docker ps -s` and `docker system df` show the same figures for the
// same writes; a count of the disk's allocated blocks would instead charge
// every container the journal and the metadata mkfs wrote,
// and lose sparse files' apparent size.
//
// The disk is read with debugfs (e2fsprogs, already needed for mkfs),
// opened read-only and without its bitmaps, one invocation per directory
// level. This is the one ext4 reader at hand: hcsshim's ext4 package only
// writes, and mounting would need a loop device and privileges. A disk
// whose VM is running is read as the guest last wrote it back, so writes
// still in the guest's page cache or journal show up late.
//
// A disk on which no VM ever ran has no UpperDir yet and measures 0.
func UpperUsage(ctx context.Context, disk string) (int64, error) {
	if _, err := os.Stat(disk); err != nil {
		return 0, fmt.Errorf("measure upper disk: %w", err)
	}
	bin, err := findDebugfs()
	if err != nil {
		return 0, err
	}
	seen := map[uint64]bool{}
	var total int64
	cmds := []string{"ls -p " + UpperDir}
	for len(cmds) > 0 {
		ents, err := debugfsList(ctx, bin, disk, cmds)
		if err != nil {
			return 0, err
		}
		cmds = cmds[:0]
		for _, e := range ents {
			if e.name == "." || e.name == ".." || seen[e.ino] {
				continue
			}
			seen[e.ino] = true
			if e.dir {
				cmds = append(cmds, fmt.Sprintf("ls -p <%d>", e.ino))
				continue
			}
			total += e.size
		}
	}
	return total, nil
}

// dirent is one line of debugfs's `ls -p`.
type dirent struct {
	ino  uint64
	name string
	dir  bool
	size int64
}

// debugfsList runs the ls commands in one debugfs and parses their
// entries. A directory that is gone (the container removed it while we
// walked, or the guest never made UpperDir) lists nothing: debugfs only
// complains on stderr, which is ignored for that reason.
func debugfsList(ctx context.Context, bin, disk string, cmds []string) ([]dirent, error) {
	cmd := exec.CommandContext(ctx, bin, "-c", "-f", "-", disk)
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("read upper disk %s with debugfs: %w: %s", disk, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return parseLsP(bytes.NewReader(out))
}

// parseLsP reads `ls -p` output: one "/ino/mode/uid/gid/name/size/" record
// per entry, with an empty size for directories. A name cannot contain '/'
// but may contain newlines, so a record is complete when it has seven
// slashes, whatever the lines it spans. Lines outside records (debugfs
// echoing its commands) are skipped.
func parseLsP(r io.Reader) ([]dirent, error) {
	var out []dirent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var rec strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if rec.Len() == 0 && !strings.HasPrefix(line, "/") {
			continue
		}
		if rec.Len() > 0 {
			rec.WriteByte('\n')
		}
		rec.WriteString(line)
		if strings.Count(rec.String(), "/") < 7 {
			continue
		}
		e, err := parseRecord(rec.String())
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		rec.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read debugfs output: %w", err)
	}
	return out, nil
}

func parseRecord(s string) (dirent, error) {
	f := strings.Split(s, "/")
	// "", ino, mode, uid, gid, name, size, ""
	if len(f) != 8 || f[0] != "" || f[7] != "" {
		return dirent{}, fmt.Errorf("unexpected debugfs entry %q", s)
	}
	ino, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return dirent{}, fmt.Errorf("debugfs entry %q: inode: %w", s, err)
	}
	mode, err := strconv.ParseUint(f[2], 8, 32)
	if err != nil {
		return dirent{}, fmt.Errorf("debugfs entry %q: mode: %w", s, err)
	}
	e := dirent{ino: ino, name: f[5], dir: mode&0o170000 == 0o040000}
	if f[6] != "" {
		if e.size, err = strconv.ParseInt(f[6], 10, 64); err != nil {
			return dirent{}, fmt.Errorf("debugfs entry %q: size: %w", s, err)
		}
	}
	return e, nil
}

// findDebugfs looks in PATH and then in the sbin directories a daemon's
// PATH often lacks.
func findDebugfs() (string, error) {
	if p, err := exec.LookPath("debugfs"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/debugfs", "/sbin/debugfs"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("debugfs not found (install e2fsprogs)")
}
