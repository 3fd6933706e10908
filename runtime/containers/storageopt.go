package containers

import (
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/docker/go-units"

	"github.com/husk-vm/husk/rootfs"
)

// upperSizeOf is the size of the container's writable disk: --storage-opt
// size=N where given (dockerd's drivers that can limit a container's
// writable layer take the same option), else def. The disk is the
// container's own ext4 file, so any size from 64MB up can be honoured;
// other options are refused, in dockerd's words.
func upperSizeOf(opts map[string]string, def int64) (int64, error) {
	size := def
	for k, v := range opts {
		if !strings.EqualFold(k, "size") {
			return 0, errdefs.ErrInvalidArgument.WithMessage("Unknown option " + k)
		}
		n, err := units.RAMInBytes(v)
		if err != nil {
			return 0, errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
		if n < rootfs.MinUpperSize {
			return 0, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("storage size %s is below the minimum of 64MB", v))
		}
		size = n
	}
	return size, nil
}
