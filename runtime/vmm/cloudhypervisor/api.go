package cloudhypervisor

// The request and response bodies of the cloud-hypervisor API that this
// driver uses, named as in the OpenAPI description (components/schemas).
// Only the fields the driver sets or reads are declared; the contract tests
// validate every body built from them against the description.

// VmConfig is the body of vm.create and the "config" of vm.info. It is
// also what a snapshot's config.json holds, although that file is
// rewritten as generic JSON so that fields unknown here survive.
type VmConfig struct {
	CPUs    *CpusConfig    `json:"cpus,omitempty"`
	Memory  *MemoryConfig  `json:"memory,omitempty"`
	Payload PayloadConfig  `json:"payload"`
	Disks   []DiskConfig   `json:"disks,omitempty"`
	Net     []NetConfig    `json:"net,omitempty"`
	Fs      []FsConfig     `json:"fs,omitempty"`
	Rng     *RngConfig     `json:"rng,omitempty"`
	Serial  *SerialConfig  `json:"serial,omitempty"`
	Console *ConsoleConfig `json:"console,omitempty"`
	Vsock   *VsockConfig   `json:"vsock,omitempty"`
}

// CpusConfig: max_vcpus above boot_vcpus leaves room for vm.resize.
type CpusConfig struct {
	BootVCPUs int `json:"boot_vcpus"`
	MaxVCPUs  int `json:"max_vcpus"`
}

// MemoryConfig sizes are in bytes; hotplug_size leaves room for vm.resize.
type MemoryConfig struct {
	Size        int64 `json:"size"`
	HotplugSize int64 `json:"hotplug_size,omitempty"`
	// Shared maps guest RAM MAP_SHARED: vhost-user devices (virtio-fs)
	// need to map it in their own process.
	Shared bool `json:"shared,omitempty"`
}

// PayloadConfig is what the guest boots: a bzImage, its initramfs and its
// command line.
type PayloadConfig struct {
	Kernel    string `json:"kernel,omitempty"`
	Cmdline   string `json:"cmdline,omitempty"`
	Initramfs string `json:"initramfs,omitempty"`
}

// DiskConfig is one virtio-blk disk.
type DiskConfig struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly,omitempty"`
	Serial   string `json:"serial,omitempty"`
	ID       string `json:"id,omitempty"`
}

// NetConfig is one virtio-net device on an existing TAP.
type NetConfig struct {
	Tap string `json:"tap,omitempty"`
	MAC string `json:"mac,omitempty"`
	ID  string `json:"id,omitempty"`
}

// FsConfig is one virtio-fs device served by a vhost-user backend
// (virtiofsd) listening on Socket.
type FsConfig struct {
	Tag       string `json:"tag"`
	Socket    string `json:"socket"`
	NumQueues int    `json:"num_queues"`
	QueueSize int    `json:"queue_size"`
	ID        string `json:"id,omitempty"`
}

// RngConfig is the virtio-rng device, so early getrandom() does not block.
type RngConfig struct {
	Src string `json:"src"`
}

// Console modes (ConsoleMode).
const (
	ModeOff  = "Off"
	ModeFile = "File"
)

// SerialConfig is the legacy serial port (ttyS0).
type SerialConfig struct {
	Mode string `json:"mode"`
	File string `json:"file,omitempty"`
}

// ConsoleConfig is the virtio console (hvc0).
type ConsoleConfig struct {
	Mode string `json:"mode"`
}

// VsockConfig is the virtio-vsock device in its hybrid form: Socket is a
// unix socket on the host that proxies connections to guest ports.
type VsockConfig struct {
	CID    int64  `json:"cid"`
	Socket string `json:"socket"`
	ID     string `json:"id,omitempty"`
}

// VM states (VmState).
const (
	StateCreated  = "Created"
	StateRunning  = "Running"
	StateShutdown = "Shutdown"
	StatePaused   = "Paused"
)

// VmInfo is the answer to vm.info.
type VmInfo struct {
	Config           VmConfig `json:"config"`
	State            string   `json:"state"`
	MemoryActualSize int64    `json:"memory_actual_size,omitempty"`
}

// VmmPingResponse is the answer to vmm.ping.
type VmmPingResponse struct {
	BuildVersion string   `json:"build_version,omitempty"`
	Version      string   `json:"version"`
	PID          int64    `json:"pid,omitempty"`
	Features     []string `json:"features,omitempty"`
}

// VmResize is the body of vm.resize; zero fields are left out and keep
// their size.
type VmResize struct {
	DesiredVCPUs int   `json:"desired_vcpus,omitempty"`
	DesiredRAM   int64 `json:"desired_ram,omitempty"`
}

// VmSnapshotConfig is the body of vm.snapshot.
type VmSnapshotConfig struct {
	DestinationURL string `json:"destination_url"`
}

// Memory restore modes (MemoryRestoreMode).
const (
	RestoreCopy     = "Copy"
	RestoreOnDemand = "OnDemand"
)

// RestoreConfig is the body of vm.restore. The v53.0 description has no
// net_fds, so new network devices are given by TAP name in the rewritten
// config.json instead of as file descriptors.
type RestoreConfig struct {
	SourceURL         string `json:"source_url"`
	Prefault          bool   `json:"prefault"`
	MemoryRestoreMode string `json:"memory_restore_mode,omitempty"`
	Resume            bool   `json:"resume"`
}

// Counters is the answer to vm.counters: per device id, named counters.
type Counters map[string]map[string]int64
