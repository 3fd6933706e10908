package agent

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// appearWait bounds how long a disk listed in /sys/block may stay
// unopenable, and appearRetry is how often it is tried meanwhile.
const (
	appearWait  = 5 * time.Second
	appearRetry = 5 * time.Millisecond
)

// whileAppearing runs op, which opens a disk findDisk found, again while
// it fails because the disk is not openable yet. The kernel's
// device_add_disk lists a new disk in /sys/block, and makes its node,
// when it adds the disk's device, and only then adds the block device an
// open looks up (bdev_add); an open between the two fails with ENXIO
// (ENOENT before the node). The disk's uevent is held back until after
// both, but the agent has no udev and polls /sys/block, and the SCSI
// disk driver probes asynchronously, so the agent can find a disk in that
// window. Under TCG, where a vCPU can be descheduled between the two
// steps, it did: one cold boot in ~380 on a stress rig failed its setup
// with "mount base /dev/sda: no such device or address".
func whileAppearing(ctx context.Context, op func() error) error {
	ctx, cancel := context.WithTimeout(ctx, appearWait)
	defer cancel()
	for {
		err := op()
		if !errors.Is(err, syscall.ENXIO) && !errors.Is(err, syscall.ENOENT) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(appearRetry):
		}
	}
}
