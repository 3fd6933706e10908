package proto

// OpWarm runs a throwaway container in a guest that has not been set up,
// then undoes it, so that the code a container's start runs in the guest
// kernel has been run once. Under TCG a restored VM starts with an empty
// translation cache (it is not part of a snapshot), and translating the
// SCSI probe, ext4 and overlay mounts, namespace creation and exec on
// first use is most of what a container start then costs; a pooled VM
// warmed this way pays it before it is taken. The agent finds the two
// disks, mounts them as a container root, runs a program that exits at
// once in a new PID, mount and UTS namespace under that root, unmounts
// everything and deletes the disks' SCSI devices, then answers; the host
// may then unplug the disks. Nothing follows on the stream.
const OpWarm Op = "warm"

// WarmSpec is OpWarm's argument (Request.Warm): the serials of a blank
// ext4 disk mounted read-only as the base and one mounted read-write as
// the upper layer, as in SetupSpec.
type WarmSpec struct {
	BaseSerial  string `json:"baseSerial"`
	UpperSerial string `json:"upperSerial"`
}
