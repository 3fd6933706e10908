package proto

// OpMountRoot mounts a container root from the VM's disks in a guest that
// has not been set up, as OpSetup would (SetupSpec's BaseSerial and
// UpperSerial), syncs it, and answers; nothing follows on the stream. A
// later OpSetup naming the same disks finds the root mounted and skips
// the mounts. It is how an image template is made: a guest snapshotted
// with an image's root mounted, whose restores start containers of that
// image without mounting anything (runtime/templates), which under TCG
// is a quarter or more of a template start's guest time.
const OpMountRoot Op = "mount-root"

// MountRootSpec is OpMountRoot's argument (Request.MountRoot).
type MountRootSpec struct {
	BaseSerial  string `json:"baseSerial"`
	UpperSerial string `json:"upperSerial"`
}
