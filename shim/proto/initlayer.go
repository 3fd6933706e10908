package proto

// The init layer is what dockerd puts between an image and a container's
// writable layer: the mount points of the files and file systems every
// container gets, /.dockerenv (which programs test to learn they run in a
// container) and /etc/mtab. Its files and links replace what the image
// has at those paths, but an image's own directories (/proc, /sys,
// /dev/pts, /dev/shm) are kept as they are, modes and owners, and only
// missing ones are added: so those go in a second layer under the image
// (InitLayerUnderDir), which fills in only what the image lacks. Neither
// reaches the writable layer, so docker diff and commit do not see them,
// and an image without /etc still gets its hosts, hostname and
// resolv.conf.
//
// It is the same for every container, so the host puts it in the guest's
// initramfs (kernel.BuildInitramfs) and the agent stacks it into each
// container's overlay as it is: building it in the guest cost each start
// 20-45 ms of emulated CPU under TCG.
const (
	// InitLayerDir holds InitLayer's entries.
	InitLayerDir = "/husk/initlayer"
	// InitLayerUnderDir holds the entries of InitLayer that are Under:
	// the init layer's directory with InitLayerUnderSuffix.
	InitLayerUnderDir    = InitLayerDir + InitLayerUnderSuffix
	InitLayerUnderSuffix = "-under"
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
	// Under puts the entry in the layer under the image: a directory the
	// image's own, if it has one, takes precedence over.
	Under bool
}

// InitLayer lists the init layer's entries, each after its parent
// directory in the same layer (the root's own children have none
// listed).
func InitLayer() []InitLayerEntry {
	return []InitLayerEntry{
		{Path: "dev", Kind: InitLayerDirectory},
		{Path: "dev/console", Kind: InitLayerFile},
		{Path: "dev", Kind: InitLayerDirectory, Under: true},
		{Path: "dev/pts", Kind: InitLayerDirectory, Under: true},
		{Path: "dev/shm", Kind: InitLayerDirectory, Under: true},
		{Path: "proc", Kind: InitLayerDirectory, Under: true},
		{Path: "sys", Kind: InitLayerDirectory, Under: true},
		{Path: ".dockerenv", Kind: InitLayerFile},
		{Path: "etc", Kind: InitLayerDirectory},
		{Path: "etc/resolv.conf", Kind: InitLayerFile},
		{Path: "etc/hosts", Kind: InitLayerFile},
		{Path: "etc/hostname", Kind: InitLayerFile},
		{Path: "etc/mtab", Kind: InitLayerSymlink, Target: "/proc/mounts"},
	}
}
