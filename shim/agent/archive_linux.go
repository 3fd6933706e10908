//go:build linux

package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// archiveArg0 marks the agent's re-executed archive helper in its argv[0].
// The helper chroots into the container root before touching any path, so
// path resolution is the container's own and cannot reach the guest's
// files; extraction is confined further by os.Root.
const archiveArg0 = "husk-agent-archive"

// archiveConfig is what the agent hands its archive helper on configFd.
type archiveConfig struct {
	Root string `json:"root"`
	// Hide are mount points (in the agent's namespace) the helper
	// detaches in its private mount namespace before it looks at any
	// path: the container's tmpfs mounts, which dockerd's archive
	// operations do not see either.
	Hide []string `json:"hide,omitempty"`
	// Etc are the container's hostname, hosts and resolv.conf, bound
	// over the root's mount points in the same private namespace:
	// dockerd's archive operations see (and write) them as the
	// container does.
	Etc  []etcBind         `json:"etc,omitempty"`
	Op   proto.Op          `json:"op"`
	Spec proto.ArchiveSpec `json:"spec"`
}

// archiveResult is one line the helper writes on statusFd: the first says
// whether the operation can go ahead (with the path's stat), the second
// (put only) how the extraction ended.
type archiveResult struct {
	Stat  *proto.PathStat `json:"stat,omitempty"`
	Error string          `json:"error,omitempty"`
	Kind  proto.ErrorKind `json:"kind,omitempty"`
}

func resultOf(err error) archiveResult {
	var ae *agentError
	if errors.As(err, &ae) {
		return archiveResult{Error: ae.msg, Kind: ae.kind}
	}
	return archiveResult{Error: err.Error(), Kind: proto.KindInternal}
}

// archive serves the archive ops through a helper process.
func (a *Agent) archive(s *stream, req *proto.Request) error {
	if req.Archive == nil {
		return &agentError{proto.KindInvalid, "archive: missing spec"}
	}
	a.mu.Lock()
	root, hide, etcDir := a.root, a.mounts.hiddenFromArchive(), a.etcDir
	a.mu.Unlock()
	if root == "" {
		return &agentError{proto.KindInvalid, "archive: the container root is not set up"}
	}
	binds, err := etcBinds(root, etcDir)
	if err != nil {
		return asAgentError(err)
	}
	// A missing mount point is one the container's init creates; the
	// archive does not, so that a docker cp changes nothing it did not
	// copy.
	binds = slices.DeleteFunc(binds, func(b etcBind) bool { return b.Create })
	h, err := a.startArchiveHelper(archiveConfig{Root: root, Hide: hide, Etc: binds, Op: req.Op, Spec: *req.Archive})
	if err != nil {
		return err
	}
	defer h.close()
	results := json.NewDecoder(h.results)
	var first archiveResult
	if err := results.Decode(&first); err != nil {
		return &agentError{proto.KindInternal, fmt.Sprintf("archive helper failed: %v", err)}
	}
	if first.Error != "" {
		return &agentError{first.Kind, first.Error}
	}
	if err := s.respond(proto.Response{Stat: first.Stat}); err != nil {
		return nil
	}
	switch req.Op {
	case proto.OpArchiveGet:
		if _, err := io.Copy(s, h.stdout); err != nil {
			a.log.Debug("archive get ended early", "path", req.Archive.Path, "err", err)
		}
	case proto.OpArchivePut:
		_, err := io.Copy(h.stdin, s.r)
		h.stdin.Close()
		h.stdin = nil
		var final archiveResult
		if derr := results.Decode(&final); derr != nil {
			final = archiveResult{Error: fmt.Sprintf("archive helper failed: %v", derr), Kind: proto.KindInternal}
		} else if err != nil && final.Error == "" {
			final = archiveResult{Error: fmt.Sprintf("receive archive: %v", err), Kind: proto.KindInternal}
		}
		_ = s.respond(proto.Response{Error: final.Error, Kind: final.Kind})
	}
	return nil
}

// archiveHelper is a running helper and our ends of its pipes.
type archiveHelper struct {
	p       *process
	stdin   *os.File // nil unless put
	stdout  *os.File
	results *os.File
}

// close releases the pipes and waits for the helper, killing it if it is
// still at work (a client that went away mid-copy).
func (h *archiveHelper) close() {
	for _, f := range []*os.File{h.stdin, h.stdout, h.results} {
		if f != nil {
			f.Close()
		}
	}
	select {
	case <-h.p.exited:
	default:
		_ = h.p.signal(syscall.SIGKILL)
		<-h.p.exited
	}
}

func (a *Agent) startArchiveHelper(cfg archiveConfig) (_ *archiveHelper, retErr error) {
	var files childFiles
	defer func() { files.release(retErr != nil) }()
	internal := func(what string, err error) error {
		return &agentError{proto.KindInternal, fmt.Sprintf("archive helper: %s: %v", what, err)}
	}
	h := &archiveHelper{}
	var stdinR *os.File
	var err error
	if cfg.Op == proto.OpArchivePut {
		if stdinR, h.stdin, err = files.pipe(); err != nil {
			return nil, internal("stdin pipe", err)
		}
	} else if stdinR, err = os.Open(os.DevNull); err != nil {
		return nil, internal("open /dev/null", err)
	} else {
		files.parent = append(files.parent, stdinR)
	}
	stdoutR, stdoutW, err := files.pipe()
	if err != nil {
		return nil, internal("stdout pipe", err)
	}
	h.stdout = stdoutR
	cfgR, cfgW, err := files.pipe()
	if err != nil {
		return nil, internal("config pipe", err)
	}
	resR, resW, err := files.pipe()
	if err != nil {
		return nil, internal("result pipe", err)
	}
	h.results = resR
	files.child = []*os.File{stdinR, stdoutW, os.Stderr, cfgR, resW}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, internal("encode config", err)
	}
	if _, err := cfgW.Write(b); err != nil {
		return nil, internal("write config", err)
	}
	cfgW.Close()

	p := &process{id: "archive", exited: make(chan struct{}), release: func() {}}
	a.pmu.Lock()
	sys := &syscall.SysProcAttr{Setsid: true}
	if len(cfg.Hide) > 0 || len(cfg.Etc) > 0 {
		// The child unshares before it execs, while it has a single
		// thread, and Go makes the new namespace's mounts private, so
		// what the helper detaches stays mounted for the container.
		sys.Unshareflags = syscall.CLONE_NEWNS
	}
	proc, err := os.StartProcess(a.opts.Exe, []string{archiveArg0}, &os.ProcAttr{
		Env: []string{}, Files: files.child, Sys: sys,
	})
	if err == nil {
		p.pid, p.osProc = proc.Pid, proc
		a.byPid[proc.Pid] = p
	}
	a.pmu.Unlock()
	if err != nil {
		return nil, internal("start", err)
	}
	files.child = files.child[:0]
	for _, f := range []*os.File{stdinR, stdoutW, cfgR, resW} {
		f.Close()
	}
	h.p = p
	return h, nil
}

// runArchiveHelper is the helper's main; it never returns.
func runArchiveHelper() {
	results := os.NewFile(statusFd, "results")
	enc := json.NewEncoder(results)
	if err := archiveHelperMain(enc); err != nil {
		_ = enc.Encode(resultOf(err))
		os.Exit(1)
	}
	os.Exit(0)
}

func archiveHelperMain(enc *json.Encoder) error {
	cfgFile := os.NewFile(configFd, "config")
	var cfg archiveConfig
	err := json.NewDecoder(cfgFile).Decode(&cfg)
	cfgFile.Close()
	if err != nil {
		return fmt.Errorf("read archive config: %w", err)
	}
	for _, p := range cfg.Hide {
		// EINVAL: no longer a mount point (already covered by another).
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("hide tmpfs %s: %w", p, err)
		}
	}
	for _, b := range cfg.Etc {
		if err := unix.Mount(b.Src, b.Dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", b.Dst, err)
		}
	}
	if err := unix.Chroot(cfg.Root); err != nil {
		return fmt.Errorf("chroot %s: %w", cfg.Root, err)
	}
	if err := os.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	spec := cfg.Spec
	switch cfg.Op {
	case proto.OpArchiveStat:
		st, err := statPath(spec.Path)
		if err != nil {
			return err
		}
		return enc.Encode(archiveResult{Stat: &st})
	case proto.OpArchiveGet:
		st, err := statPath(spec.Path)
		if err != nil {
			return err
		}
		if err := enc.Encode(archiveResult{Stat: &st}); err != nil {
			return err
		}
		out := bufio.NewWriterSize(os.Stdout, 64<<10)
		if err := writeArchive(out, spec.Path); err != nil {
			return err
		}
		return out.Flush()
	case proto.OpArchivePut:
		return extractHere(enc, spec)
	}
	return &agentError{proto.KindInvalid, fmt.Sprintf("unknown archive op %q", cfg.Op)}
}

// extractHere resolves the destination fully (a symlink to a directory is
// a fine destination, as in Docker), says whether it can go ahead, and
// extracts stdin there.
func extractHere(enc *json.Encoder, spec proto.ArchiveSpec) error {
	dest, err := filepath.EvalSymlinks(absPath(spec.Path))
	if err != nil {
		return notFound(spec.Path, err)
	}
	fi, err := os.Lstat(dest)
	if err != nil {
		return notFound(spec.Path, err)
	}
	if !fi.IsDir() {
		return &agentError{proto.KindInvalid, "extraction point is not a directory"}
	}
	opts := extractOptions{noOverwriteDirNonDir: spec.NoOverwriteDirNonDir}
	if spec.ChownTo != "" {
		u, err := lookupUser(spec.ChownTo, nil)
		if err != nil {
			return err
		}
		opts.chown = &[2]int{u.UID, u.GID}
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return fmt.Errorf("open %s: %w", dest, err)
	}
	defer root.Close()
	if err := enc.Encode(archiveResult{}); err != nil {
		return err
	}
	err = extractArchive(os.Stdin, root, opts)
	// Whatever is left (after an error) is read so the agent's copy ends.
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err != nil {
		return err
	}
	return enc.Encode(archiveResult{})
}
