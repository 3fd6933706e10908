// Package vmm is the small interface every VMM driver satisfies. A driver
// knows about kernels, disks, sockets and VMM processes; it knows nothing
// about containers or Docker.
package vmm

import (
	"context"
	"net"
)

// Config describes one VM.
type Config struct {
	// ID names the VM in logs and process titles.
	ID string
	// Dir is private to this VM: the driver keeps its sockets, pid file and
	// console log here. It exists before Start is called.
	Dir       string
	Kernel    string
	Initramfs string
	// Cmdline is appended to the kernel command line the driver needs.
	Cmdline   string
	MemoryMiB int
	CPUs      int
	// Disks are attached in this order, each with its Serial visible to
	// the guest: as virtio-blk devices (/sys/block/*/serial), or, by
	// QEMU on the Q35 machine, as SCSI disks on a virtio-scsi controller
	// (the unit serial number page, /sys/block/*/device/vpd_pg80).
	Disks []Disk
	// Accel is "kvm" or "tcg"; drivers that have no choice ignore it.
	Accel string
	// Nets are attached as virtio-net devices in this order.
	Nets []Net
	// Shares are host directories served by virtiofsd processes the
	// caller started; each becomes a vhost-user-fs device the guest
	// mounts by its Tag. A VM with shares has its memory shared with
	// those processes.
	Shares []Share
	// FileMemory backs the guest's RAM with a file in Dir that the VMM
	// writes through. A Snapshot of such a VM leaves the RAM out of its
	// stream and puts the file in the snapshot directory instead, and
	// every Restore of that snapshot maps the file copy-on-write: a
	// restore then copies no RAM up front, the guest's pages come in as
	// it touches them, and restores share every page none of them has
	// written. On a Restore of such a snapshot, FileMemory has the VM
	// write through to a copy of the snapshot's file in Dir instead, so
	// that a snapshot of the restored VM is again one whose restores map
	// their RAM (a template made from a template). Drivers that cannot do
	// this refuse it (errdefs.ErrNotImplemented); it cannot be combined
	// with Shares.
	FileMemory bool
	// BeforeResume, on a Restore, runs once the snapshot is loaded and
	// before the guest runs again; if it fails, so does the Restore, and
	// the VMM is killed. Callers finish checking a snapshot's files in it
	// while the VMM loads them, rather than before the VMM starts.
	BeforeResume func(ctx context.Context) error
}

// Share is one virtio-fs device backed by a vhost-user socket on which a
// virtiofsd (owned by the caller) already listens.
type Share struct {
	// Tag is the name the guest mounts (mount -t virtiofs TAG DIR); at
	// most 36 bytes.
	Tag string
	// Socket is the vhost-user socket's path. Drivers reach a socket
	// that lies in Config.Dir by a path relative to it, so a long
	// directory does not break the 108-byte limit of socket paths.
	Socket string
}

// Net is one guest network interface backed by a host TAP device that
// already exists (the caller owns it).
type Net struct {
	Tap string
	// MAC is the guest's address, "52:54:00:..." form.
	MAC string
}

// Disk is a raw disk image.
type Disk struct {
	Path     string
	ReadOnly bool
	Serial   string
	// Removable makes the disk a device whose medium can be changed while
	// the VM runs; with no Path it starts empty. A Machine's AttachDisks
	// puts a disk of the same serial and access into such an empty device
	// rather than plugging a new one, and DetachDisks empties it again.
	// Drivers that lack removable media refuse it with
	// errdefs.ErrNotImplemented.
	Removable bool
}

// Driver starts VMs of one kind.
type Driver interface {
	// Name is "qemu" or "cloud-hypervisor".
	Name() string
	// Start launches the VMM and returns once it runs. The guest may not be
	// ready yet: callers wait for the agent. The VMM process is not tied to
	// the caller's lifetime (it survives a daemon restart).
	Start(ctx context.Context, cfg Config) (Machine, error)
	// Reattach finds the VMM a previous Start or Restore left running in dir.
	Reattach(ctx context.Context, dir string) (Machine, error)
	// Version identifies the VMM build ("qemu 7.2.19", "cloud-hypervisor
	// v53.0"). Snapshots record it; Restore under another version is
	// refused by the caller.
	Version(ctx context.Context) (string, error)
	// Restore starts a new VMM from a snapshot that a Machine of this driver
	// wrote with Snapshot, and resumes it. cfg describes the new VM: it may
	// differ from the snapshotted one only in ID, Dir, disk paths and Nets
	// (TAP names; MACs stay as snapshotted, the guest is re-addressed
	// afterwards). snapshotDir is only read, so one snapshot can be
	// restored into many VMs at once.
	Restore(ctx context.Context, cfg Config, snapshotDir string) (Machine, error)
}

// Machine is one running VMM process.
type Machine interface {
	PID() int
	// DialAgent opens the byte stream to the guest agent. Only one may be
	// open at a time; a new one replaces a closed one.
	DialAgent(ctx context.Context) (net.Conn, error)
	// Pause stops the vCPUs; Resume restarts them. Pausing a paused VM and
	// resuming a running one are not errors.
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	// Snapshot writes the paused VM's memory and device state into dir,
	// which exists and is empty. The VM stays paused. Disks are not copied:
	// the caller copies them while the VM is paused.
	Snapshot(ctx context.Context, dir string) error
	// Shutdown asks the VMM to stop the VM and exit, and waits for it.
	Shutdown(ctx context.Context) error
	// Kill ends the VMM at once.
	Kill() error
	// Wait blocks until the VMM process has exited or ctx is done.
	Wait(ctx context.Context) error
	// Cleanup removes what the driver created in Dir. Call after exit.
	Cleanup() error
}
