package containers

import "runtime"

// maxDefaultCPUs caps DefaultCPUs. A second vCPU is what makes the
// difference: the guest agent sets up a container's network beside its
// root filesystem, and under TCG each vCPU is a host thread translating
// guest code, so with two they translate side by side (a template start
// of `docker run --rm true` went from a median of 1,203 ms to 922 ms on a
// 2-core host, faster in 12 of 12 pairs; a cold start from 4.47 to
// 4.27 s). Every vCPU also costs the host memory (~4.6 MiB more for a
// TCG guest's second) and the guest per-CPU memory out of its 256 MiB,
// so a default sized to a large host's CPU count would be paid by every
// sandbox; `docker run --cpus` or huskd's --cpus give more.
const maxDefaultCPUs = 2

// DefaultCPUs is the vCPU count of a guest whose container does not ask
// for one: the host's CPUs, as a runc container sees them all, up to
// maxDefaultCPUs.
func DefaultCPUs() int {
	return min(runtime.NumCPU(), maxDefaultCPUs)
}
