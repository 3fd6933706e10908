package proto

// Mount types of MountSpec.
const (
	// MountVirtiofs mounts a virtio-fs share (a host directory, or a host
	// file alone in its share under Path).
	MountVirtiofs = "virtiofs"
	// MountTmpfs mounts a fresh tmpfs.
	MountTmpfs = "tmpfs"
)

// MountSpec is one filesystem the agent mounts into the container root at
// OpSetup, after the root and before any process starts. Mounts are
// applied in order, so a parent comes before what is mounted inside it.
type MountSpec struct {
	Type string `json:"type"`
	// Tag names the virtio-fs device (MountVirtiofs), or the forwarded
	// socket (MountSocket) in OpSocketConnect requests.
	Tag string `json:"tag,omitempty"`
	// Path is what to mount from the share, relative to its root; ""
	// mounts the whole share. A file share holds its file under a name
	// the host chose.
	Path string `json:"path,omitempty"`
	// Target is the absolute path in the container. It is resolved inside
	// the container root (symlinks cannot lead out of it), and created
	// when missing: a directory, or an empty file when the source is one.
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Options are mount data for a tmpfs ("size=64m,mode=1777"), and the
	// flags "noexec", "nosuid", "nodev", "exec" for either type.
	Options []string `json:"options,omitempty"`
	// CopyUp fills the mounted directory, when it is empty, with what
	// the image has at Target (files, owners, modes), as Docker does for
	// a volume the first time it is mounted.
	CopyUp bool `json:"copyUp,omitempty"`
}
