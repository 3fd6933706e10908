package proto

// A container's upper disk is an ext4 that the host formats (rootfs) and
// the agent mounts: the overlay's writable layer and its work directory
// are these directories at the disk's root. The host formats them in, so
// that a container's first start does not make them under TCG, and reads
// the writable layer's size from the first without booting the guest.
const (
	// UpperLayerDir is the overlay's writable layer.
	UpperLayerDir = "upper"
	// UpperWorkDir is overlayfs's work directory.
	UpperWorkDir = "work"
)
