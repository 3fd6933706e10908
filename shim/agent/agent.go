//go:build linux

package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// Rootfs prepares the container's root filesystem on OpSetup and releases it
// on OpShutdown.
type Rootfs interface {
	Mount(ctx context.Context, spec proto.SetupSpec) (dir string, err error)
	Unmount(ctx context.Context) error
}

// DirRootfs is a root filesystem that already exists as a directory; Mount
// and Unmount do nothing. Tests use it in place of the guest's disks.
type DirRootfs string

// Mount returns the directory.
func (d DirRootfs) Mount(context.Context, proto.SetupSpec) (string, error) { return string(d), nil }

// Unmount does nothing.
func (d DirRootfs) Unmount(context.Context) error { return nil }

// Options configure an Agent. The zero value is what runs in the guest
// except for Rootfs, PowerOff, ReapOrphans and Refresher, which
// cmd/husk-agent sets.
type Options struct {
	Logger *slog.Logger
	// Rootfs prepares the container root; required.
	Rootfs Rootfs
	// Network configures the guest's interfaces on OpSetup (see
	// ConfigureNetwork). Nil ignores SetupSpec.Network: tests that run the
	// agent on a host must not touch its interfaces.
	Network func(ctx context.Context, spec *proto.NetworkSpec) error
	// WarmNetwork runs the interfaces through Network's steps and back on
	// OpWarm (see WarmNetwork); nil skips that, as Network nil does.
	WarmNetwork func(ctx context.Context) error
	// StateDir holds the agent's own files (the container's /etc/hosts,
	// /etc/hostname, /etc/resolv.conf). Default /run/husk.
	StateDir string
	// Exe is the agent's binary, re-executed as the archive helper; it
	// must call Reexec first thing in main. Default /proc/self/exe.
	Exe string
	// InitExe is the C init (cinit/src/init.c), which starts a container's
	// main process (cinit_linux.go); without it, main processes cannot
	// start.
	InitExe string
	// PowerOff ends the machine after OpShutdown has been answered. Nil
	// means OpShutdown only stops processes and releases the root.
	PowerOff func() error
	// ReapOrphans makes the agent wait for every child, not only its own
	// processes: PID 1 inherits all orphans and must reap them.
	ReapOrphans bool
	// Refresher sets the clock and reseeds the RNG on OpRefresh; nil
	// refuses OpRefresh (tests run the agent on a host they must not
	// touch). OpClock needs it to be a ClockShifter too. cmd/husk-agent
	// sets GuestRefresher.
	Refresher Refresher
	// Interfaces configures hot-plugged NICs on OpAddInterface and
	// deconfigures them on OpRemoveInterface; nil refuses both, as for
	// Refresher. cmd/husk-agent sets GuestInterfaces.
	Interfaces Interfaces
	// OutputLimit bounds the bytes held per output stream while no host
	// stream takes them. Default 8 MiB.
	OutputLimit int
	// MountShare mounts a virtio-fs share (SetupSpec.Mounts); default a
	// virtiofs mount. Tests that run the agent on a host replace it.
	MountShare func(tag, dir string, flags uintptr) error
	// ProcSys is where sysctls are written (SetupSpec.Settings); default
	// /proc/sys. Tests that run the agent on a host replace it.
	ProcSys string
	// Proc is where the guest kernel's devices and misc files are read
	// (checkGuestDevices); default /proc.
	Proc string
	// Dev is where a privileged container's devices are found; default
	// /dev.
	Dev string
	// Cgroups gives the container's processes a cgroup of their own on
	// OpSetup (see GuestCgroups); nil refuses a pids limit (tests run the
	// agent on a host whose cgroups they must not touch).
	Cgroups Cgroups
	// DNSRedirect sends the guest's traffic for proto.EmbeddedDNSAddress
	// port 53 to huskd's DNS server (SetupSpec.DNSServer); nil refuses a
	// DNS server (tests run the agent on a host whose sockets they must
	// not touch). cmd/husk-agent sets an embeddeddns.Redirect.
	DNSRedirect DNSRedirect
}

// DNSRedirect sends the traffic for one address to another; a zero to
// stops it.
type DNSRedirect interface {
	Set(addr, to netip.AddrPort) error
}

// Cgroups manages the container's cgroup.
type Cgroups interface {
	// Create makes the container's cgroup with limits set and returns its
	// directory, which the container's processes join.
	Create(limits proto.LimitsSpec) (string, error)
	// SetLimits changes the cgroup's pids.max and memory.max (0: none).
	SetLimits(limits proto.LimitsSpec) error
	// Adopt moves the container's processes that run outside the cgroup
	// into it: a limit set by docker update on a container started
	// without one, or a freeze.
	Adopt() error
	// Freeze freezes the cgroup's processes, returning once all are
	// frozen, or thaws them.
	Freeze(ctx context.Context, frozen bool) error
}

// Agent serves the protocol of package proto for one machine. Its processes
// and their buffered output outlive any one session.
type Agent struct {
	log  *slog.Logger
	opts Options

	mu       sync.Mutex
	root     string // set by OpSetup
	mounts   *mounter
	hostname string
	etcDir   string
	settings *proto.ContainerSettings // set by OpSetup
	// oomKillsAtSetup is the guest's OOM kill count when the container
	// was set up (see proto.ExitStatus.OOMKilled).
	oomKillsAtSetup uint64
	// cgroupDir is the container's cgroup (Options.Cgroups); "" without
	// one.
	cgroupDir string
	// cgroupLate says the group was made after the container's processes
	// started (a freeze, or docker update): what they had charged before
	// stays the root's, so its memory figures are not the container's.
	cgroupLate bool
	// frozen says OpFreeze froze the container's cgroup: a restored
	// copy's processes stay frozen until the host thaws them.
	frozen  bool
	procs   map[string]*process
	warming bool // an OpWarm is under way
	// network is what the guest's interfaces were last given (by the
	// setup or a refresh); nil when unknown, as after an interface was
	// added or removed. A refresh that asks for the same skips the
	// re-addressing: a checkpoint restored into its own container gets
	// the address and MAC it had, and under TCG the netlink round trips
	// of a re-addressing, all translated afresh after a restore, cost
	// the guest hundreds of milliseconds.
	network *proto.NetworkSpec
	// setupEnded is closed, and replaced, whenever a setup ends;
	// setupErr is why the last one failed (ProcessSpec.AwaitSetup).
	setupEnded chan struct{}
	setupErr   error
	// netPending is the network setup still under way after the root was
	// set up (setup); nil when none is.
	netPending *netWait
	// reseeded is closed once the last refresh's RNG reseed has ended,
	// and reseedErr is why it failed; nil before any refresh
	// (awaitReseed).
	reseeded  chan struct{}
	reseedErr error

	// pmu orders process creation against reaping so that no exit goes
	// unattributed between fork and registration.
	pmu   sync.Mutex
	byPid map[int]*process

	sigch     chan os.Signal
	stop      chan struct{}
	reapDone  chan struct{}
	closeOnce sync.Once
	// lastCap is the guest kernel's last capability (lastCapability).
	lastCap int
	// zygote is a main process's init started ahead of its container
	// (zygote_linux.go), guarded by pmu.
	zygote *zygote
}

// New makes an Agent and starts its reaper. Close stops it.
func New(opts Options) (*Agent, error) {
	if opts.Rootfs == nil {
		return nil, errors.New("agent: Options.Rootfs is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StateDir == "" {
		opts.StateDir = "/run/husk"
	}
	if opts.Exe == "" {
		opts.Exe = "/proc/self/exe"
	}
	if opts.MountShare == nil {
		opts.MountShare = mountVirtiofs
	}
	if opts.ProcSys == "" {
		opts.ProcSys = "/proc/sys"
	}
	if opts.Proc == "" {
		opts.Proc = "/proc"
	}
	if opts.Dev == "" {
		opts.Dev = "/dev"
	}
	a := &Agent{
		log:        opts.Logger,
		opts:       opts,
		lastCap:    lastCapability(opts.ProcSys),
		procs:      map[string]*process{},
		byPid:      map[int]*process{},
		setupEnded: make(chan struct{}),
		sigch:      make(chan os.Signal, 1),
		stop:       make(chan struct{}),
		reapDone:   make(chan struct{}),
	}
	startReaper(a)
	return a, nil
}

// Close kills every process the agent started and stops the reaper.
func (a *Agent) Close() error {
	if z := a.discardZygote(); z != nil {
		<-z.exited
	}
	a.killAll(context.Background())
	a.closeOnce.Do(func() {
		close(a.stop)
		<-a.reapDone
	})
	return nil
}

// Listener yields one connection per host session: a virtio-serial port
// once the host has connected, or an accepted vsock connection.
type Listener interface {
	Accept(ctx context.Context) (io.ReadWriteCloser, error)
}

// Serve runs sessions from l one after another until ctx ends or l fails.
// A session that fails only ends that session.
func (a *Agent) Serve(ctx context.Context, l Listener) error {
	for {
		conn, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("accept host session: %w", err)
		}
		a.log.Info("host session started")
		err = a.ServeConn(ctx, conn)
		a.log.Info("host session ended", "err", err)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// yamuxConfig is shared by both ends: keep-alives off so a paused VM is not
// declared dead, stream-open timeout off so a slow boot does not kill the
// session, and write timeouts long enough for a guest under TCG.
func yamuxConfig(log *slog.Logger) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = false
	cfg.ConnectionWriteTimeout = 2 * time.Minute
	cfg.StreamOpenTimeout = 0
	cfg.StreamCloseTimeout = 2 * time.Minute
	cfg.LogOutput = nil
	cfg.Logger = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	return cfg
}

// ServeConn runs one session over conn (proto.AcceptSession, then a yamux
// server) until it fails or ctx ends, and closes conn.
//
// It returns without waiting for the session's requests to finish, so the
// next session can start while they wind down. A restored checkpoint's
// agent is still in the session it was snapshotted in: that session fails
// on the new host's hello, and its requests (the main process's output
// attachments, its wait) let go on paths that run for the first time
// since the restore. Waiting for them held the next session back: a
// restore's connect took a median of 363 ms against 184 ms without the
// wait (12 interleaved restores each, TCG). The requests use only their
// own session's streams, closed by then (yamux's Close returns once its
// send and receive loops have), and the agent's state is under the same
// locks as for requests of one session running at once.
func (a *Agent) ServeConn(ctx context.Context, conn io.ReadWriteCloser) error {
	stopStart := context.AfterFunc(ctx, func() { conn.Close() })
	rest, err := proto.AcceptSession(conn)
	if !stopStart() {
		return ctx.Err()
	}
	if err != nil {
		conn.Close()
		return err
	}
	sess, err := yamux.Server(readWriteCloser{rest, conn}, yamuxConfig(a.log))
	if err != nil {
		conn.Close()
		return fmt.Errorf("start yamux session: %w", err)
	}
	defer sess.Close()
	stopWatch := context.AfterFunc(ctx, func() { sess.Close() })
	defer stopWatch()

	for {
		st, err := sess.AcceptStream()
		if err != nil {
			sess.Close()
			return err
		}
		go a.handle(ctx, sess, st)
	}
}

// readWriteCloser is a connection with the bytes its session start read
// ahead.
type readWriteCloser struct {
	io.Reader
	io.WriteCloser
}

// stream is one accepted request stream.
type stream struct {
	net.Conn
	r *bufio.Reader
}

func (s *stream) Read(p []byte) (int, error) { return s.r.Read(p) }

func (s *stream) respond(r proto.Response) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.Conn.Write(append(b, '\n'))
	return err
}

func (a *Agent) handle(ctx context.Context, sess *yamux.Session, c net.Conn) {
	s := &stream{Conn: c, r: bufio.NewReaderSize(c, 64<<10)}
	defer s.Close()
	line, err := proto.ReadLine(s.r)
	if err != nil {
		a.log.Debug("read request", "err", err)
		return
	}
	var req proto.Request
	if err := json.Unmarshal(line, &req); err != nil {
		_ = s.respond(errResponse(&agentError{proto.KindInvalid, fmt.Sprintf("decode request: %v", err)}))
		return
	}
	a.log.Debug("request", "op", req.Op, "id", req.ID)
	if err := a.dispatch(ctx, sess, s, &req); err != nil {
		_ = s.respond(errResponse(err))
	}
}

// agentError carries an ErrorKind to the host.
type agentError struct {
	kind proto.ErrorKind
	msg  string
}

func (e *agentError) Error() string { return e.msg }

func errResponse(err error) proto.Response {
	var ae *agentError
	if errors.As(err, &ae) {
		return proto.Response{Error: ae.msg, Kind: ae.kind}
	}
	return proto.Response{Error: err.Error(), Kind: proto.KindInternal}
}

func noProcess(id string) error {
	return &agentError{proto.KindNoProcess, fmt.Sprintf("no such process: %s", id)}
}

// dispatch serves one request. A returned error is sent as the Response;
// handlers that answered themselves return nil.
func (a *Agent) dispatch(ctx context.Context, sess *yamux.Session, s *stream, req *proto.Request) error {
	switch req.Op {
	case proto.OpPing:
		var u unix.Utsname
		_ = unix.Uname(&u)
		return s.respond(proto.Response{Version: proto.Version, Info: &proto.AgentInfo{Kernel: unix.ByteSliceToString(u.Release[:])}})
	case proto.OpSetup:
		if req.Setup == nil {
			return &agentError{proto.KindInvalid, "setup: missing spec"}
		}
		if err := a.setup(ctx, *req.Setup); err != nil {
			return err
		}
		return s.respond(proto.Response{})
	case proto.OpStart:
		if req.Process == nil {
			return &agentError{proto.KindInvalid, "start: missing process spec"}
		}
		if req.Process.AwaitSetup {
			if err := a.awaitSetup(ctx, sess.CloseChan()); err != nil {
				return err
			}
		}
		if err := a.awaitReseed(ctx, sess.CloseChan()); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		p, err := a.start(req.ID, *req.Process)
		if err != nil {
			return err
		}
		if err := s.respond(proto.Response{Pid: p.pid}); err != nil {
			return nil
		}
		return a.answerExit(sess, s, p)
	case proto.OpSocketConnect:
		return a.socketConnect(ctx, s, req.ID)
	case proto.OpShutdown:
		return a.shutdown(ctx, s)
	case proto.OpWarm:
		if req.Warm == nil {
			return &agentError{proto.KindInvalid, "warm: missing spec"}
		}
		if err := a.warm(ctx, *req.Warm); err != nil {
			return err
		}
		return s.respond(proto.Response{})
	case proto.OpMountRoot:
		if req.MountRoot == nil {
			return &agentError{proto.KindInvalid, "mount-root: missing spec"}
		}
		if err := a.mountRoot(ctx, *req.MountRoot); err != nil {
			return err
		}
		return s.respond(proto.Response{})
	case proto.OpLimits:
		if err := a.setLimits(req.Limits); err != nil {
			return err
		}
		return s.respond(proto.Response{})
	case proto.OpFreeze:
		if err := a.freeze(ctx, req.Freeze, sess.CloseChan()); err != nil {
			return err
		}
		return s.respond(proto.Response{})
	case proto.OpRefresh:
		if err := a.refresh(ctx, req.Refresh); err != nil {
			return err
		}
		return s.respond(proto.Response{})
	case proto.OpClock:
		resp, err := a.clock(req.Clock)
		if err != nil {
			return err
		}
		return s.respond(resp)
	case proto.OpAddInterface, proto.OpRemoveInterface:
		if err := a.changeInterface(ctx, req.Op, req.Interface); err != nil {
			return err
		}
		return s.respond(proto.Response{})
	case proto.OpApplyLayer, proto.OpCutLayer:
		return a.layerOp(ctx, s, req)
	case proto.OpArchiveStat, proto.OpArchiveGet, proto.OpArchivePut:
		return a.archive(s, req)
	case proto.OpChanges, proto.OpDiffLayer, proto.OpExport:
		return a.changesOp(ctx, s, req)
	case proto.OpLayerSize:
		return a.layerSize(ctx, s)
	}

	p := a.lookup(req.ID)
	if p == nil {
		return noProcess(req.ID)
	}
	switch req.Op {
	case proto.OpWait:
		return a.answerExit(sess, s, p)
	case proto.OpStdout, proto.OpStderr:
		out := p.stdout
		if req.Op == proto.OpStderr {
			out = p.stderr
		}
		if err := s.respond(proto.Response{Pid: p.pid}); err != nil {
			return nil
		}
		// The host detaches by closing its side, or its session ends; stop
		// sending at once so the rest stays here for the next attachment.
		var spec proto.OutputSpec
		if req.Output != nil {
			spec = *req.Output
		}
		go func() {
			if spec.Ack {
				if err := out.readAcks(s.r, s); err != nil {
					a.log.Warn("output acknowledgements", "id", p.id, "op", req.Op, "err", err)
				}
			} else {
				_, _ = io.Copy(io.Discard, s.r)
			}
			s.Close()
			out.detach(s)
		}()
		if err := out.sendTo(s, spec); err != nil {
			a.log.Debug("output attachment ended", "id", p.id, "op", req.Op, "err", err)
		}
		return nil
	case proto.OpStdin:
		if p.stdinFile() == nil {
			return &agentError{proto.KindInvalid, fmt.Sprintf("process %s has no stdin", p.id)}
		}
		if err := s.respond(proto.Response{Pid: p.pid}); err != nil {
			return nil
		}
		p.copyStdin(s, sess)
		return nil
	case proto.OpSignal:
		if err := p.signal(syscall.Signal(req.Signal)); err != nil {
			return err
		}
		return s.respond(proto.Response{Pid: p.pid})
	case proto.OpResize:
		if req.Resize == nil {
			return &agentError{proto.KindInvalid, "resize: missing size"}
		}
		if err := p.resize(*req.Resize); err != nil {
			return err
		}
		return s.respond(proto.Response{Pid: p.pid})
	case proto.OpTop:
		procs, err := a.top(p)
		if err != nil {
			return err
		}
		return s.respond(proto.Response{Pid: p.pid, Processes: procs})
	case proto.OpStats:
		st, err := a.stats(p)
		if err != nil {
			return err
		}
		return s.respond(proto.Response{Pid: p.pid, Stats: st})
	case proto.OpForget:
		if err := a.forget(p); err != nil {
			return err
		}
		return s.respond(proto.Response{})
	}
	return &agentError{proto.KindInvalid, fmt.Sprintf("unknown op %q", req.Op)}
}

// answerExit sends the exit Response once p has exited, unless the session
// ends first.
func (a *Agent) answerExit(sess *yamux.Session, s *stream, p *process) error {
	select {
	case <-p.exited:
		a.log.Debug("process exited", "id", p.id, "code", p.status.Code)
		a.mu.Lock()
		oom := a.root != "" && oomKills() > a.oomKillsAtSetup
		a.mu.Unlock()
		_ = s.respond(proto.Response{Pid: p.pid, Exit: &proto.ExitStatus{Code: p.status.Code, Signal: p.status.Signal, OOMKilled: oom}})
	case <-sess.CloseChan():
	}
	return nil
}

func (a *Agent) lookup(id string) *process {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.procs[id]
}

func (a *Agent) forget(p *process) error {
	select {
	case <-p.exited:
	default:
		return &agentError{proto.KindInvalid, fmt.Sprintf("process %s is still running", p.id)}
	}
	a.mu.Lock()
	if a.procs[p.id] == p {
		delete(a.procs, p.id)
	}
	a.mu.Unlock()
	p.release()
	return nil
}

// netWait is a network setup under way: done is closed once it has
// ended, and err is then why it failed.
type netWait struct {
	done chan struct{}
	err  error
}

// setup prepares the root once per boot; a repeated setup (a new host
// session after a daemon restart) is accepted without redoing it. Starts
// waiting in awaitSetup learn how it ended.
//
// The root is published (a.root) as soon as it is ready, while the
// network may still be being set up: a main process starts then and its
// init does everything up to the exec of the program, which waits for the
// network (start's barrier). Under TCG the two are each ~0.1 s of a
// template start's guest time, and they now run side by side. A network
// that fails takes the root back and fails the setup, and so the start.
func (a *Agent) setup(ctx context.Context, spec proto.SetupSpec) error {
	a.mu.Lock()
	if w := a.netPending; w != nil {
		a.mu.Unlock()
		<-w.done
		return w.err
	}
	t0 := time.Now()
	netDone, err := a.setupLocked(ctx, spec)
	a.setupSettled(err)
	if err != nil || netDone == nil {
		a.mu.Unlock()
		return err
	}
	w := &netWait{done: make(chan struct{})}
	a.netPending = w
	a.mu.Unlock()
	err = <-netDone
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("setup: network: %w", err)
		a.undoSetupLocked(ctx)
	} else if a.opts.Network != nil {
		a.network = appliedNetwork(spec.Network)
	}
	w.err = err
	a.netPending = nil
	close(w.done)
	a.setupSettled(err)
	a.log.Debug("container network ready", "err", err, "took", time.Since(t0))
	return err
}

// setupSettled tells starts waiting in awaitSetup that a setup has
// ended, or published its root.
func (a *Agent) setupSettled(err error) {
	a.setupErr = err
	close(a.setupEnded)
	a.setupEnded = make(chan struct{})
}

// undoSetupLocked takes back a root setupLocked published.
func (a *Agent) undoSetupLocked(ctx context.Context) {
	a.discardZygote()
	if a.mounts != nil {
		_ = a.mounts.release()
	}
	_ = a.opts.Rootfs.Unmount(ctx)
	a.root, a.hostname, a.etcDir, a.mounts, a.settings, a.cgroupDir, a.cgroupLate = "", "", "", nil, nil, "", false
}

// awaitSetup returns once the root is set up, or with the error of the
// setup that failed (ProcessSpec.AwaitSetup), or when the session ends.
func (a *Agent) awaitSetup(ctx context.Context, sessionClosed <-chan struct{}) error {
	for {
		a.mu.Lock()
		root, ended, err := a.root, a.setupEnded, a.setupErr
		a.mu.Unlock()
		switch {
		case root != "":
			return nil
		case err != nil:
			return &agentError{proto.KindInvalid, "start: the container root was not set up: " + err.Error()}
		}
		select {
		case <-ended:
		case <-ctx.Done():
			return fmt.Errorf("start: wait for the setup: %w", ctx.Err())
		case <-sessionClosed:
			return errors.New("start: the session ended before the setup")
		}
	}
}

// setupLocked sets up the root and publishes it, with the network being
// set up beside it; it returns the channel on which the network setup's
// end is told, nil when there is none to wait for.
func (a *Agent) setupLocked(ctx context.Context, spec proto.SetupSpec) (<-chan error, error) {
	if a.root != "" {
		return nil, nil
	}
	if a.warming {
		return nil, &agentError{proto.KindInvalid, "setup: the guest is warming up"}
	}
	// The network and the root are set up side by side: the mounts wait
	// on disk reads, which the VMM serves on another host thread, while
	// the network setup keeps the guest's CPU busy.
	t0 := time.Now()
	var netDone chan error
	if a.opts.Network != nil && spec.Network != nil {
		netDone = make(chan error, 1)
		go func() { netDone <- a.opts.Network(ctx, spec.Network) }()
	}
	// fail ends a setup that failed: its network setup must not outlive
	// it, and a network that failed too is the error, as it always was.
	fail := func(err error) (<-chan error, error) {
		if netDone != nil {
			if netErr := <-netDone; netErr != nil {
				return nil, fmt.Errorf("setup: network: %w", netErr)
			}
		}
		return nil, err
	}
	root, err := a.opts.Rootfs.Mount(ctx, spec)
	if err != nil {
		return fail(fmt.Errorf("setup: %w", err))
	}
	if s := spec.Settings; s != nil {
		if err := checkGuestDevices(a.opts.Proc, s.Devices); err != nil {
			_ = a.opts.Rootfs.Unmount(ctx)
			return fail(&agentError{proto.KindInvalid, err.Error()})
		}
	}
	if s := spec.Settings; s != nil && len(s.Sysctls) > 0 {
		if err := applySysctls(a.opts.ProcSys, s.Sysctls); err != nil {
			_ = a.opts.Rootfs.Unmount(ctx)
			return fail(err)
		}
	}
	etcDir := filepath.Join(a.opts.StateDir, "etc")
	if err := writeEtcFiles(etcDir, spec); err != nil {
		_ = a.opts.Rootfs.Unmount(ctx)
		return fail(fmt.Errorf("setup: %w", err))
	}
	if err := a.redirectDNS(spec.DNSServer); err != nil {
		_ = a.opts.Rootfs.Unmount(ctx)
		return fail(fmt.Errorf("setup: %w", err))
	}
	cgroupDir, err := a.createCgroup(spec.Settings.Limits())
	if err != nil {
		_ = a.opts.Rootfs.Unmount(ctx)
		return fail(err)
	}
	mounts := &mounter{sharesDir: filepath.Join(a.opts.StateDir, "shares"), mountShare: a.opts.MountShare}
	if err := mounts.apply(root, spec.Mounts); err != nil {
		_ = mounts.release()
		_ = a.opts.Rootfs.Unmount(ctx)
		return fail(fmt.Errorf("setup: %w", err))
	}
	a.root, a.hostname, a.etcDir, a.mounts, a.settings, a.cgroupDir, a.cgroupLate = root, spec.Hostname, etcDir, mounts, spec.Settings, cgroupDir, false
	a.oomKillsAtSetup = oomKills()
	if netDone == nil && a.opts.Network != nil {
		a.network = appliedNetwork(spec.Network)
	}
	a.log.Debug("container root ready", "root", root, "hostname", spec.Hostname, "took", time.Since(t0))
	return netDone, nil
}

// redirectDNS sends what the guest sends to proto.EmbeddedDNSAddress
// port 53 to server, or nowhere when it is "".
func (a *Agent) redirectDNS(server string) error {
	var to netip.AddrPort
	if server != "" {
		var err error
		if to, err = netip.ParseAddrPort(server); err != nil {
			return &agentError{proto.KindInvalid, fmt.Sprintf("DNS server %q: %v", server, err)}
		}
	}
	if a.opts.DNSRedirect == nil {
		if to.IsValid() {
			return &agentError{proto.KindInvalid, "this agent does not redirect DNS"}
		}
		return nil
	}
	t0 := time.Now()
	embedded := netip.AddrPortFrom(netip.MustParseAddr(proto.EmbeddedDNSAddress), 53)
	if err := a.opts.DNSRedirect.Set(embedded, to); err != nil {
		return fmt.Errorf("DNS server %s: %w", server, err)
	}
	a.log.Debug("DNS redirected", "from", embedded, "to", to, "took", time.Since(t0))
	return nil
}

// writeEtcFiles writes the files the container sees as /etc/hostname,
// /etc/hosts and /etc/resolv.conf. They live outside the container root and
// are bind-mounted in, as Docker does, so they never land in the upper
// layer's diff.
func writeEtcFiles(dir string, spec proto.SetupSpec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	files := map[string]string{}
	if spec.Hostname != "" {
		files["hostname"] = spec.Hostname + "\n"
	}
	hosts := spec.Hosts
	if hosts == "" {
		var b strings.Builder
		b.WriteString("127.0.0.1\tlocalhost\n")
		b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
		b.WriteString("fe00::\tip6-localnet\nff00::\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")
		if spec.Hostname != "" {
			b.WriteString("127.0.0.1\t" + spec.Hostname + "\n")
		}
		hosts = b.String()
	}
	files["hosts"] = hosts
	if spec.ResolvConf != "" {
		files["resolv.conf"] = spec.ResolvConf
	}
	// Plain writes: nothing reads the files before the setup ends, and a
	// setup that fails is done again from the start. Temp files, fsyncs
	// and renames cost 25-40 ms of a start under TCG; these writes, 7-15.
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// shutdown stops every process, releases the root, answers, and powers off.
func (a *Agent) shutdown(ctx context.Context, s *stream) error {
	a.discardZygote()
	a.killAll(ctx)
	unix.Sync()
	a.mu.Lock()
	mounted := a.root != ""
	mounts := a.mounts
	a.root, a.mounts = "", nil
	a.mu.Unlock()
	if mounts != nil {
		// Volumes first: the root cannot go while they sit in it.
		if err := mounts.release(); err != nil {
			a.log.Error("release volumes", "err", err)
		}
	}
	if mounted {
		if err := a.opts.Rootfs.Unmount(ctx); err != nil {
			a.log.Error("release container root", "err", err)
		}
	}
	unix.Sync()
	if err := s.respond(proto.Response{}); err != nil {
		a.log.Warn("answer shutdown", "err", err)
	}
	s.Close()
	if a.opts.PowerOff != nil {
		if err := a.opts.PowerOff(); err != nil {
			a.log.Error("power off", "err", err)
		}
	}
	return nil
}

// killAll sends SIGKILL to every running process and waits until they are
// reaped or ctx ends.
func (a *Agent) killAll(ctx context.Context) {
	a.mu.Lock()
	procs := make([]*process, 0, len(a.procs))
	for _, p := range a.procs {
		procs = append(procs, p)
	}
	a.mu.Unlock()
	for _, p := range procs {
		_ = p.signal(syscall.SIGKILL)
	}
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-ctx.Done():
			return
		}
	}
}

// mountRoot mounts a container root ahead of the setup that will use it
// (proto.OpMountRoot), and syncs it: what the mounts dirtied is written
// before the guest is snapshotted, rather than by every guest restored
// from it.
func (a *Agent) mountRoot(ctx context.Context, spec proto.MountRootSpec) error {
	if spec.BaseSerial == "" || spec.UpperSerial == "" {
		return &agentError{proto.KindInvalid, "mount-root: missing disk serials"}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.root != "" || a.warming {
		return &agentError{proto.KindInvalid, "mount-root: the guest is set up or warming"}
	}
	root, err := a.opts.Rootfs.Mount(ctx, proto.SetupSpec{BaseSerial: spec.BaseSerial, UpperSerial: spec.UpperSerial})
	if err != nil {
		return fmt.Errorf("mount-root: %w", err)
	}
	if a.opts.InitExe != "" {
		if err := a.startZygote(root); err != nil {
			a.log.Warn("containers of this root start their own init", "err", err)
		}
	}
	unix.Sync()
	return nil
}
