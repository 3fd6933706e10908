package containers

import (
	"fmt"
	"runtime"

	"github.com/containerd/errdefs"
)

// validateNanoCPUs is dockerd's check of --cpus at create: between 0.01
// and the host's CPU count. A VM could be given more vCPUs than the host
// has, but dockerd refuses them, and a count QEMU cannot start would only
// fail later, at start, as a server error.
func validateNanoCPUs(n int64) error {
	if n == 0 {
		return nil
	}
	if nc := runtime.NumCPU(); n < 0 || n > int64(nc)*1e9 {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("range of CPUs is from 0.01 to %[1]d.00, as there are only %[1]d CPUs available", nc))
	}
	return nil
}
