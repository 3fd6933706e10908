package proto

// The init layer is what dockerd puts between an image and a container's
// writable layer: the mount points of the files and file systems every
// container gets, /.dockerenv (which programs test to learn they run in a
// container) and /etc/mtab. It shadows what the image has at those paths
// and never reaches the writable layer, so docker diff and commit do not
// see it, and an image without /etc still gets its hosts, hostname and
// resolv.conf.
//
// It is the same for every container, so the host puts it in the guest's
// initramfs (kernel.BuildInitramfs) and the agent stacks it into each
// container's overlay as it is: building it in the guest cost each start
// 20-45 ms of emulated CPU under TCG.
const (
	// InitLayerDir holds InitLayer's entries.
	InitLayerDir = "/husk/initlayer"
	// HideLostFoundDir holds only a whiteout of /lost+found, which the
	// ext4 writer (rootfs) always creates in an image's base disk: the
	// agent stacks it above a base whose lost+found is empty, taken to be
	// the writer's, since an image's own would be just as empty and is
	// rare.
	HideLostFoundDir = "/husk/hide-lost-found"
)

// InitLayerKind is what an init layer entry is.
type InitLayerKind int

const (
	InitLayerDirectory InitLayerKind = iota
	// InitLayerFile is an empty file, mode 0755 as in dockerd's layer.
	InitLayerFile
	InitLayerSymlink
)

// InitLayerEntry is one path of the init layer, relative to its root.
type InitLayerEntry struct {
	Path   string
	Kind   InitLayerKind
	Target string // of a symlink
}

// InitLayer lists the init layer's entries, each after its parent
// directory (the root's own children have none listed).
func InitLayer() []InitLayerEntry {
	return []InitLayerEntry{
		{Path: "dev", Kind: InitLayerDirectory},
		{Path: "dev/pts", Kind: InitLayerDirectory},
		{Path: "dev/shm", Kind: InitLayerDirectory},
		{Path: "dev/console", Kind: InitLayerFile},
		{Path: "proc", Kind: InitLayerDirectory},
		{Path: "sys", Kind: InitLayerDirectory},
		{Path: ".dockerenv", Kind: InitLayerFile},
		{Path: "etc", Kind: InitLayerDirectory},
		{Path: "etc/resolv.conf", Kind: InitLayerFile},
		{Path: "etc/hosts", Kind: InitLayerFile},
		{Path: "etc/hostname", Kind: InitLayerFile},
		{Path: "etc/mtab", Kind: InitLayerSymlink, Target: "/proc/mounts"},
	}
}
