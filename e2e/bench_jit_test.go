package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/husk-vm/husk/runtime/vmm/qemu"
)

// translatedBlocks asks the QEMU of container id how many blocks TCG has
// translated so far (HMP's info jit, over the VM's QMP socket in huskd's
// state directory). Unlike wall-clock time it hardly moves with a noisy
// host, so it shows changes to how much guest code a start runs first.
func translatedBlocks(ctx context.Context, daemonRoot, id string) (blocks, flushes int, err error) {
	var out string
	if err := vmQMP(ctx, daemonRoot, id, "human-monitor-command", map[string]string{"command-line": "info jit"}, &out); err != nil {
		return 0, 0, fmt.Errorf("translated blocks of %s: %w", id, err)
	}
	return parseInfoJit(out)
}

// releaseTranslations has the QEMU of container id drop its translated
// code, as huskd has an idle VM's dropped (--tcg-release-idle), but at
// once. Only the QEMU `make qemu` builds has the command.
func releaseTranslations(ctx context.Context, daemonRoot, id string) error {
	if err := vmQMP(ctx, daemonRoot, id, qemu.ReleaseCommand, nil, nil); err != nil {
		return fmt.Errorf("release translated code of %s: %w", id, err)
	}
	return nil
}

// vmQMP sends one command to the QEMU of container id over the VM's QMP
// socket in huskd's state directory.
func vmQMP(ctx context.Context, daemonRoot, id, command string, args, result any) error {
	return dirQMP(ctx, filepath.Join(daemonRoot, "containers", id, "vm"), command, args, result)
}

// dirQMP runs a QMP command on the QEMU that runs in directory dir.
func dirQMP(ctx context.Context, dir, command string, args, result any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The socket's path is longer than a unix address holds; reach it
	// through a descriptor of its directory, as huskd does.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	q, err := qemu.DialQMP(ctx, fmt.Sprintf("/proc/self/fd/%d/qmp.sock", d.Fd()))
	if err != nil {
		return err
	}
	defer q.Close()
	return q.Execute(ctx, command, args, result)
}

// parseInfoJit reads the "TB count" line of HMP's info jit: the blocks
// in TCG's buffer now. A full buffer is flushed and the count starts over
// ("TB flush count"), so a count is only what it says when no flush came
// after the one a restore or reset makes.
func parseInfoJit(out string) (blocks, flushes int, err error) {
	blocks, flushes = -1, -1
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		for prefix, v := range map[string]*int{"TB count": &blocks, "TB flush count": &flushes} {
			if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				if *v, err = strconv.Atoi(strings.TrimSpace(rest)); err != nil {
					return 0, 0, fmt.Errorf("info jit: %s: %w", prefix, err)
				}
			}
		}
	}
	if blocks < 0 || flushes < 0 {
		return 0, 0, fmt.Errorf("no TB count or TB flush count in info jit: %q", out)
	}
	return blocks, flushes, nil
}
