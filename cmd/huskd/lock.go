package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFile is held, under the root, by the daemon using that root.
const lockFile = "huskd.lock"

// lockRoot takes the root for this process, as dockerd's pid file does:
// two daemons on one root would both own its containers, networks and
// disks (one's shutdown deleting the bridge the other had just made).
// The lock is an flock, so it ends with the process however it ends, on
// a file opened close-on-exec, so the VMMs the daemon starts, which may
// outlive it, do not hold it. The file names the holder's pid.
func lockRoot(root string) (*os.File, error) {
	path := filepath.Join(root, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock root %s: %w", root, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder, _ := os.ReadFile(path)
			return nil, fmt.Errorf("another huskd (pid %s) is using %s: stop it, or give this one another --root", strings.TrimSpace(string(holder)), root)
		}
		return nil, fmt.Errorf("lock root %s: %w", root, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
