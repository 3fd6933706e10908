// Package proto is the one definition of the host↔guest protocol spoken
// between huskd (shim/host) and husk-agent (shim/agent).
//
// Transport: a single byte stream per VM — a virtio-serial port under QEMU,
// a hybrid-vsock connection under cloud-hypervisor — carrying a yamux
// session. The host is the yamux client and always speaks first; the agent is
// the yamux server. Each session begins with a short line-based exchange
// before yamux (see OpenSession) so that the agent drops a stale session
// that the byte stream did not end. Sessions are disposable: when the host side goes away
// (daemon restart, snapshot restore) the agent drops the session and accepts
// a new one without disturbing its processes or losing their buffered output.
//
// Every yamux stream begins with exactly one Request, JSON-encoded on one
// line, sent by the host. The agent answers with one Response line. What
// follows depends on the Op:
//
//   - OpPing, OpSetup, OpSignal, OpResize, OpShutdown, OpForget, OpRefresh,
//     OpAddInterface, OpRemoveInterface, OpWarm, OpMountRoot: nothing; the
//     agent closes the stream.
//   - OpStart: after the first Response (Pid set, or Error), the stream stays
//     open; when the process exits the agent sends a second Response with
//     Exit set and closes the stream.
//   - OpWait: one Response with Exit set, sent when the process has exited
//     (at once if it already has).
//   - OpStdout, OpStderr: after the Response, raw bytes of that stream until
//     the process closes it; then the agent closes its side. Output is held
//     in the guest until a host stream takes it, so nothing is lost between
//     start and attach or across a session change. With Output.Ack the host
//     writes acknowledgements back (see OutputSpec) and the agent holds
//     bytes until they are acknowledged, so nothing is lost across a host
//     that dies between reading bytes and storing them either.
//   - OpStdin: after the Response, the host writes raw bytes; closing its
//     side of the stream closes the process's stdin.
//
// Yamux keep-alives are disabled on both sides: a paused or snapshotted VM
// must not be declared dead.
package proto

// PortName is the virtio-serial port name the agent looks for under
// /sys/class/virtio-ports/*/name.
const PortName = "husk.agent"

// ContainerInitPath is where a guest's initramfs holds the C init the
// agent starts containers' main processes with (shim/agent/cinit).
const ContainerInitPath = "/husk/container-init"

// VsockPort is the vsock port the agent listens on where vsock exists.
const VsockPort = 1024

// Version is bumped on any incompatible change to the messages below.
const Version = 1

// Op names a request.
type Op string

const (
	OpPing     Op = "ping"
	OpSetup    Op = "setup"
	OpStart    Op = "start"
	OpWait     Op = "wait"
	OpStdin    Op = "stdin"
	OpStdout   Op = "stdout"
	OpStderr   Op = "stderr"
	OpSignal   Op = "signal"
	OpResize   Op = "resize"
	OpForget   Op = "forget"
	OpShutdown Op = "shutdown"
)

// Request is the first line of every stream.
type Request struct {
	Op Op `json:"op"`
	// ID names a process; chosen by the host, unique within the VM.
	ID      string       `json:"id,omitempty"`
	Setup   *SetupSpec   `json:"setup,omitempty"`
	Process *ProcessSpec `json:"process,omitempty"`
	Signal  int          `json:"signal,omitempty"`
	Resize  *WindowSize  `json:"resize,omitempty"`
	Refresh *RefreshSpec `json:"refresh,omitempty"`
	Warm    *WarmSpec    `json:"warm,omitempty"`
	// MountRoot is the argument of OpMountRoot.
	MountRoot *MountRootSpec `json:"mountRoot,omitempty"`
	Archive   *ArchiveSpec   `json:"archive,omitempty"`
	Diff      *DiffSpec      `json:"diff,omitempty"`
	// Interface is the argument of OpAddInterface and OpRemoveInterface
	// (netplug.go).
	Interface *InterfaceChangeSpec `json:"interface,omitempty"`
	// Output is the argument of OpStdout and OpStderr; nil is the zero
	// spec.
	Output *OutputSpec `json:"output,omitempty"`
	// Limits is the argument of OpLimits.
	Limits *LimitsSpec `json:"limits,omitempty"`
	// Clock is the argument of OpClock.
	Clock *ClockSpec `json:"clock,omitempty"`
	// Freeze is the argument of OpFreeze.
	Freeze *FreezeSpec `json:"freeze,omitempty"`
}

// OutputSpec says how an output attachment hands bytes over.
type OutputSpec struct {
	// Ack: the host acknowledges what it has stored by writing, on the
	// stream, the number of bytes of this attachment stored so far as an
	// 8-byte big-endian integer (AckSize), as often as it likes. The agent
	// drops bytes only once acknowledged, and after the process closes the
	// stream it waits for the last acknowledgement before ending.
	Ack bool `json:"ack,omitempty"`
	// Resend: bytes an earlier attachment was sent but did not
	// acknowledge are sent again, because the host that read them died
	// before storing them. Without it they count as taken: after a
	// checkpoint restore the snapshot's unacknowledged bytes were stored by
	// the run that took the checkpoint.
	Resend bool `json:"resend,omitempty"`
}

// AckSize is the size of one output acknowledgement.
const AckSize = 8

// Response is the agent's answer line.
type Response struct {
	// Error is set when the request failed; Kind classifies it.
	Error string    `json:"error,omitempty"`
	Kind  ErrorKind `json:"kind,omitempty"`
	// Version is set in answer to OpPing.
	Version int         `json:"version,omitempty"`
	Pid     int         `json:"pid,omitempty"`
	Exit    *ExitStatus `json:"exit,omitempty"`
	Info    *AgentInfo  `json:"info,omitempty"`
	Stat    *PathStat   `json:"stat,omitempty"`
	// TimeUnixNano answers OpClock: the guest's wall clock as the agent
	// answered.
	TimeUnixNano int64 `json:"timeUnixNano,omitempty"`
	// Processes answers OpTop.
	Processes []ProcessInfo `json:"processes,omitempty"`
	// Stats answers OpStats.
	Stats *GuestStats `json:"stats,omitempty"`
	// Changes answers OpChanges.
	Changes []Change `json:"changes,omitempty"`
	// LayerSize answers OpLayerSize, in bytes.
	LayerSize *int64 `json:"layerSize,omitempty"`
}

// ErrorKind lets the host map guest failures to the error Docker users see.
type ErrorKind string

const (
	// KindNotFound: the executable was not found (Docker: exit 127).
	KindNotFound ErrorKind = "not-found"
	// KindPermission: the executable could not be run (Docker: exit 126).
	KindPermission ErrorKind = "permission"
	// KindUser: the user or group could not be resolved.
	KindUser ErrorKind = "user"
	// KindNoProcess: no process with that ID.
	KindNoProcess ErrorKind = "no-process"
	KindInvalid   ErrorKind = "invalid"
	// KindConfig: the container's configuration cannot be applied in its
	// root (a working directory that is a file), in the words dockerd
	// itself uses for it, a daemon error there.
	KindConfig   ErrorKind = "config"
	KindInternal ErrorKind = "internal"
)

// EmbeddedDNSAddress is the nameserver in the resolv.conf of a container
// on a user-defined network, as under dockerd (SetupSpec.DNSServer).
const EmbeddedDNSAddress = "127.0.0.11"

// AgentInfo describes the guest, answered to OpPing.
type AgentInfo struct {
	Kernel string `json:"kernel"` // uname -r
}

// SetupSpec prepares the container root. It is sent once per boot, before
// the first OpStart.
type SetupSpec struct {
	Hostname string `json:"hostname"`
	// BaseSerial and UpperSerial are the serial numbers of the read-only
	// base disk and the writable upper disk; the agent finds the devices
	// through /sys/block/*/serial (virtio-blk) or the SCSI unit serial
	// number page, /sys/block/*/device/vpd_pg80 (QEMU's virtio-scsi).
	BaseSerial  string `json:"baseSerial"`
	UpperSerial string `json:"upperSerial"`
	// Hosts is written to /etc/hosts when non-empty.
	Hosts string `json:"hosts,omitempty"`
	// ResolvConf is the content of the container's /etc/resolv.conf; when
	// empty the image's own file is left in place.
	ResolvConf string `json:"resolvConf,omitempty"`
	// DNSServer ("ip:port") is huskd's DNS server for a container on a
	// user-defined network: the guest sends what its processes send to
	// EmbeddedDNSAddress port 53 there. Empty sends nothing anywhere.
	DNSServer string `json:"dnsServer,omitempty"`
	// Network configures the guest's interfaces (network.go).
	Network *NetworkSpec `json:"network,omitempty"`
	// Mounts are mounted into the container root (mounts.go).
	Mounts []MountSpec `json:"mounts,omitempty"`
	// Settings are the container-wide resource flags (resources.go).
	Settings *ContainerSettings `json:"settings,omitempty"`
}

// ProcessSpec follows the OCI runtime-spec Process.
type ProcessSpec struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	// User is Docker's --user: "", "name", "uid", "name:group", "uid:gid".
	// The agent resolves names through the container root's /etc/passwd and
	// /etc/group, and adds the user's supplementary groups.
	User string `json:"user,omitempty"`
	// GroupAdd is Docker's --group-add: supplementary groups beyond the
	// user's, by name (in the container's /etc/group) or number.
	GroupAdd []string `json:"groupAdd,omitempty"`
	// NoNewPrivileges sets the process's no_new_privs before its exec
	// (--security-opt no-new-privileges): execve grants it no privileges,
	// by setuid bits or file capabilities.
	NoNewPrivileges bool `json:"noNewPrivileges,omitempty"`
	Terminal        bool `json:"terminal,omitempty"`
	// ConsoleSize is the terminal's initial size when Terminal is set.
	ConsoleSize *WindowSize `json:"consoleSize,omitempty"`
	// Stdin: the host will attach an OpStdin stream; otherwise stdin is
	// /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// Exec: run in the namespaces (PID, mount, UTS, ...) of the process
	// named ExecOf instead of new ones (docker exec).
	ExecOf string `json:"execOf,omitempty"`
	// Rlimits are set before the program runs (--ulimit).
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// Capabilities bound the process's capabilities; nil leaves it the
	// agent's (all of them).
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// AwaitSetup lets the start be sent beside the OpSetup that prepares
	// its root, on another stream, instead of after its answer: the agent
	// holds a start that finds no root until a setup ends, and fails it if
	// that setup failed. This saves the guest, which under TCG is the
	// slow side, waiting out a round trip to the host between the two.
	AwaitSetup bool `json:"awaitSetup,omitempty"`
	// Tmpfs are mounted for this process alone (a main process, not an
	// exec), in its own mount namespace once its root is entered: a build
	// step's RUN --mount=type=tmpfs, and type=cache as a cache that starts
	// empty. Mount points the root lacked are removed again when the
	// process is forgotten, so that they stay out of the step's layer.
	Tmpfs []ProcessTmpfs `json:"tmpfs,omitempty"`
	// Binds are bound for this process alone too, after Tmpfs: a build
	// step's RUN --mount=type=bind and type=secret, whose files the host
	// has put in the root under Staged. Staged is removed, with the mount
	// stubs, when the process is forgotten; created and removed before
	// the step's layer is cut, it leaves nothing in it.
	Binds  []ProcessBind `json:"binds,omitempty"`
	Staged string        `json:"staged,omitempty"`
}

// ProcessBind is one of ProcessSpec.Binds: Source and Target are
// absolute in the root; Dir says the source is a directory.
type ProcessBind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	Dir      bool   `json:"dir,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// ProcessTmpfs is one of ProcessSpec.Tmpfs: an absolute target in the
// root, and the mount's root directory's mode and owner.
type ProcessTmpfs struct {
	Target string `json:"target"`
	Mode   uint32 `json:"mode"`
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	// Size caps the mount, in bytes; 0 is tmpfs's default.
	Size int64 `json:"size,omitempty"`
}

// ExitStatus is how a process ended. Code follows the shell convention
// Docker uses: 128+signal when killed by a signal.
type ExitStatus struct {
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
	// OOMKilled says the guest's kernel has OOM-killed a process since
	// the container was set up: the guest is the container's alone, so
	// any such kill was one of the container's processes, as dockerd's
	// OOMKilled counts.
	OOMKilled bool `json:"oomKilled,omitempty"`
}

// WindowSize is a terminal size.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}
