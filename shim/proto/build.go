package proto

// Build VMs (docker build's RUN steps) keep one root across several
// processes and turn its changes into image layers. The root is an overlay
// whose lower layers are the image's base disk and the layers stacked so
// far, and whose upper holds the changes since the last cut or applied
// layer. Both ops are refused while a process runs, and need OpSetup first.
//
//   - OpApplyLayer: the agent answers a Response (Error set if it cannot
//     apply now); the host then sends an uncompressed OCI layer tar, which
//     the agent reads up to its end-of-archive marker, stacks on top of the
//     root (OCI whiteouts become overlay whiteouts) and answers with a
//     second Response, Error set if the layer could not be applied.
//   - OpCutLayer: the agent answers a Response, then sends an uncompressed
//     OCI layer tar of the changes since the last cut or applied layer
//     (overlay whiteouts become OCI whiteouts; the mount points the agent
//     itself makes for processes, /proc, /sys, /dev and /etc/{hostname,
//     hosts,resolv.conf}, are left out), followed by a second Response.
//     The changes then become a lower layer and a fresh upper starts. If
//     the stream ends before the second Response, the layer is incomplete
//     and must be discarded.
const (
	OpApplyLayer Op = "apply-layer"
	OpCutLayer   Op = "cut-layer"
)
