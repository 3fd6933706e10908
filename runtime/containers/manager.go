// Package containers is the container lifecycle: create, start, stop, kill,
// wait, attach, logs and removal of containers that each run as one VM, with
// their records persisted so they survive a daemon restart. It drives a VMM
// driver and the guest agent; it knows Docker's container model (that is what
// it serves) but nothing of HTTP.
package containers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/renameio/v2"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/network"

	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/rootfs"
	"github.com/husk-vm/husk/runtime/logs"
	"github.com/husk-vm/husk/runtime/vmm"
)

// Image is what the runtime needs to know of an image.
type Image struct {
	ID     string // "sha256:<hex>"
	Config v1.Config
}

// Images resolves references to images and opens their layers.
type Images interface {
	Resolve(ctx context.Context, ref string) (Image, error)
	Layers(ctx context.Context, imageID string) ([]rootfs.LayerOpener, error)
}

// Disks makes the per-image base and per-container upper disks.
type Disks interface {
	EnsureBase(ctx context.Context, imageID string, layers []rootfs.LayerOpener) (string, error)
	NewUpper(ctx context.Context, path string, size int64) error
}

// Guest is how a VM is made for a container.
type Guest struct {
	Driver    vmm.Driver
	Kernel    string
	Initramfs string
	Accel     string
	MemoryMiB int
	CPUs      int
	// HostMemoryMiB is the host's RAM, which no VM exceeds (0: not
	// known; no bound).
	HostMemoryMiB int
	// UpperSize is the apparent size of each container's writable disk.
	UpperSize int64
	// ReadyTimeout bounds boot to agent-ready.
	ReadyTimeout time.Duration
	// Cmdline is appended to every guest's kernel command line.
	Cmdline string
	// Virtiofsd serves volumes to the VM; default
	// /usr/lib/qemu/virtiofsd.
	Virtiofsd string
	// KernelSymbol names a guest kernel address ("" for none), for the
	// report of a guest that hung; nil leaves addresses bare.
	KernelSymbol func(pc uint64) string
}

// Options configure a Manager.
type Options struct {
	Root   string // e.g. /var/lib/husk/containers
	Images Images
	Disks  Disks
	Guest  Guest
	// Network connects containers to networks; nil gives them none.
	Network Network
	// Volumes holds named and anonymous volumes; nil refuses them (bind
	// mounts and tmpfs still work).
	Volumes Volumes
	// Templates start VMs from snapshots; nil boots every VM.
	Templates Templates
	Logger    *slog.Logger
	// Events receives container events; nil drops them.
	Events EventSink
}

// Manager owns every container.
type Manager struct {
	root    string
	images  Images
	disks   Disks
	guest   Guest
	net     Network
	volumes Volumes
	log     *slog.Logger
	events  EventSink
	// templates may be nil.
	templates Templates

	// mu guards byID and byName. A container's own mu is taken before
	// it, never after: a container's exit, removal or rename holds its
	// own lock and then takes this one, and the image store's lock may be
	// held while InUse runs, which a container's start, holding its own
	// lock, also takes.
	mu     sync.Mutex
	byID   map[string]*ctr
	byName map[string]*ctr // name without the leading "/"

	boot  kernel.BootDigests // of the guest kernel and initramfs, for checkpoints
	execs execStore
	// shuttingDown: the daemon is stopping containers, which must not
	// restart by policy. Guarded by mu.
	shuttingDown bool
}

// Record is a container as persisted.
type Record struct {
	ID         string
	Name       string
	Created    time.Time
	Image      string // as the user named it
	ImageID    string
	Config     *container.Config
	HostConfig *container.HostConfig
	Path       string
	Args       []string
	State      container.State
	// VMDir is where the VMM keeps its sockets while the container runs.
	VMDir string
	// Networks are the networks the container joins, by name, with the
	// endpoint settings it was created or connected with.
	Networks map[string]*network.EndpointSettings `json:",omitempty"`
	// RestartCount counts restarts by policy since the last API start.
	RestartCount int
	// ManuallyStopped: stopped or killed through the API since its last
	// start (an unless-stopped container then stays down).
	ManuallyStopped bool
	// Mounts are the container's volumes, binds and tmpfs mounts
	// (mounts.go), parents first.
	Mounts []Mount `json:",omitempty"`
	// LinkIDs are the IDs of HostConfig.Links' targets, in its order: a
	// link follows its target across a rename, as dockerd's does. Records
	// written before it was kept find targets by name.
	LinkIDs []string `json:",omitempty"`
	// FreshUpper is the stamp of the upper disk's file as Create made it.
	// A first start that finds the file so knows that nothing has written
	// the disk, which may then be replaced by an image template's
	// (Templates.Start). Nil once the container has started.
	FreshUpper *rootfs.FileStamp `json:",omitempty"`
	// RemovalInProgress: a docker rm has begun. It is on the record
	// before the removal kills anything, so a daemon that dies during it
	// finds the container marked and marks it dead (Restore), as dockerd
	// does.
	RemovalInProgress bool `json:",omitempty"`
	// VMMemoryMiB is the RAM of the VM the container last started in. A
	// docker update of a running container's --memory changes its cgroup's
	// limit within that VM, so it may differ from what the HostConfig
	// would size. 0 in records written before it was kept.
	VMMemoryMiB int `json:",omitempty"`
	// VMCPUs is, likewise, the vCPUs of that VM, within which a docker
	// update of --cpus changes the cgroup's quota.
	VMCPUs int `json:",omitempty"`
}

const recordFile = "config.json"

// New loads every container record under opts.Root.
func New(ctx context.Context, opts Options) (*Manager, error) {
	if err := os.MkdirAll(opts.Root, 0o700); err != nil {
		return nil, fmt.Errorf("create container root: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{root: opts.Root, images: opts.Images, disks: opts.Disks, guest: opts.Guest, net: opts.Network, volumes: opts.Volumes, log: log, events: opts.Events, templates: opts.Templates,
		byID: map[string]*ctr{}, byName: map[string]*ctr{}}
	entries, err := os.ReadDir(opts.Root)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(opts.Root, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, recordFile))
		if err != nil {
			// A directory without a record is a create that never finished.
			log.Warn("removing incomplete container", "dir", dir, "err", err)
			_ = os.RemoveAll(dir)
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			log.Error("skipping unreadable container record", "dir", dir, "err", err)
			continue
		}
		c, err := m.newCtr(dir, rec)
		if err != nil {
			return nil, err
		}
		m.recoverFromCheckpointing(c)
		m.byID[rec.ID] = c
		m.byName[rec.Name] = c
		m.acquireVolumes(rec)
	}
	return m, nil
}

func (m *Manager) newCtr(dir string, rec Record) (*ctr, error) {
	lf, err := logs.Open(filepath.Join(dir, rec.ID+"-json.log"))
	if err != nil {
		return nil, err
	}
	// A bad option fails the next start (configureLog); until then the
	// log is kept whole.
	if o, err := logOptions(rec.HostConfig.LogConfig); err == nil {
		lf.SetOptions(o)
	}
	return &ctr{m: m, dir: dir, imageID: rec.ImageID, rec: rec, log: lf, hub: newHub()}, nil
}

// InUse lists the containers that use imageID (for image removal and
// listing). The image store calls it holding its own lock, so it takes no
// container's lock (Manager.mu).
func (m *Manager) InUse(imageID string) []string {
	return m.usersOf(imageID, false)
}

// Running lists the running (or paused) containers that use imageID, for
// image removal. Like InUse it takes no container's lock.
func (m *Manager) Running(imageID string) []string {
	return m.usersOf(imageID, true)
}

func (m *Manager) usersOf(imageID string, runningOnly bool) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, c := range m.byID {
		if c != nil && c.imageID == imageID && (!runningOnly || c.live.Load()) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// all is every container, as a list taken under m.mu that the caller
// may go through taking each one's lock.
func (m *Manager) all() []*ctr {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := make([]*ctr, 0, len(m.byID))
	for _, c := range m.byID {
		if c != nil {
			all = append(all, c)
		}
	}
	return all
}

// lookup resolves a full ID, a name (with or without "/") or an ID prefix,
// in that order, as dockerd does.
func (m *Manager) lookup(ref string) (*ctr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ref == "" {
		return nil, errdefs.ErrNotFound.WithMessage("No such container: ")
	}
	if c, ok := m.byID[ref]; ok {
		return c, nil
	}
	if c, ok := m.byName[strings.TrimPrefix(ref, "/")]; ok {
		return c, nil
	}
	var found *ctr
	for id, c := range m.byID {
		if strings.HasPrefix(id, ref) {
			if found != nil {
				return nil, errdefs.ErrInvalidArgument.WithMessage("Multiple IDs found with provided prefix: " + ref)
			}
			found = c
		}
	}
	if found == nil {
		return nil, errdefs.ErrNotFound.WithMessage("No such container: " + ref)
	}
	return found, nil
}

// Create makes a container: its record, its upper disk, and (once per image)
// the image's base disk.
// RuntimeName is the one runtime a daemon whose VMs run under the VMM
// driver vmmName reports (docker info's Runtimes) and accepts (--runtime).
func RuntimeName(vmmName string) string { return "husk-" + vmmName }

func (m *Manager) Create(ctx context.Context, req CreateRequest) (resp container.CreateResponse, err error) {
	if req.Config == nil {
		return resp, errdefs.ErrInvalidArgument.WithMessage("config cannot be empty in order to create a container")
	}
	hc := req.HostConfig
	if hc == nil {
		hc = &container.HostConfig{}
	}
	if hc.NetworkMode == "" {
		hc.NetworkMode = "default"
	}
	// An unknown policy would otherwise be stored and silently never
	// applied; dockerd refuses it at create.
	if err := container.ValidateRestartPolicy(hc.RestartPolicy); err != nil {
		return resp, errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	if err := validateNanoCPUs(hc.NanoCPUs); err != nil {
		return resp, err
	}
	if err := validateLogConfig(hc.LogConfig); err != nil {
		return resp, err
	}
	if err := validateResources(hc); err != nil {
		return resp, err
	}
	if _, err := parseSecurityOpt(hc.SecurityOpt); err != nil {
		return resp, err
	}
	if err := refuseSharedNamespaces(hc); err != nil {
		return resp, err
	}
	if hc.AutoRemove && hc.RestartPolicy.Name != "" && hc.RestartPolicy.Name != container.RestartPolicyDisabled {
		return resp, errdefs.ErrInvalidArgument.WithMessage("can't create 'AutoRemove' container with restart policy")
	}
	if err := validateHealthcheck(req.Config.Healthcheck); err != nil {
		return resp, err
	}
	if wd := req.Config.WorkingDir; wd != "" && !path.IsAbs(wd) {
		return resp, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("the working directory '%s' is invalid, it needs to be an absolute path", wd))
	}
	if s := req.Config.StopSignal; s != "" {
		if _, err := ParseSignal(s, 0); err != nil {
			return resp, err
		}
	}
	if hc.Runtime != "" && (m.guest.Driver == nil || hc.Runtime != RuntimeName(m.guest.Driver.Name())) {
		return resp, errdefs.ErrInvalidArgument.WithMessage("Unknown runtime specified " + hc.Runtime)
	}
	if hc.Runtime == "" && m.guest.Driver != nil {
		// As dockerd records its default runtime (runc) in the container.
		hc.Runtime = RuntimeName(m.guest.Driver.Name())
	}
	linkIDs, err := m.linkTargets(hc.Links)
	if err != nil {
		return resp, err
	}
	upperSize, err := upperSizeOf(hc.StorageOpt, m.guest.UpperSize)
	if err != nil {
		return resp, err
	}
	name := strings.TrimPrefix(req.Name, "/")
	nets, err := m.configureNetwork(hc, req.Networking)
	if err != nil {
		return resp, err
	}

	img, err := m.images.Resolve(ctx, req.Config.Image)
	if err != nil {
		return resp, err
	}
	// Not found, as dockerd answers: the CLI then pulls for the platform
	// before it gives up.
	if req.Platform != "" && req.Platform != "linux" && req.Platform != "linux/amd64" {
		return resp, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("image with reference %s was found but does not match the specified platform: wanted %s, actual: linux/amd64", req.Config.Image, req.Platform))
	}
	cfg := mergeImageConfig(req.Config, img.Config)
	if len(cfg.Entrypoint) == 0 && len(cfg.Cmd) == 0 {
		return resp, errdefs.ErrInvalidArgument.WithMessage("no command specified")
	}

	id, err := newID()
	if err != nil {
		return resp, err
	}
	if cfg.Hostname == "" {
		cfg.Hostname = id[:12]
	}
	if err := m.reserveName(&name, id); err != nil {
		return resp, err
	}
	defer func() {
		if err != nil {
			m.releaseName(name, id)
		}
	}()

	inherited, err := m.volumesFrom(hc.VolumesFrom)
	if err != nil {
		return resp, err
	}
	mounts, err := planMounts(cfg, hc, inherited, bindExists)
	if err != nil {
		return resp, err
	}
	if err := m.useVolumes(ctx, id, mounts); err != nil {
		return resp, err
	}
	defer func() {
		if err != nil {
			m.releaseVolumes(context.WithoutCancel(ctx), id, mounts, true)
		}
	}()

	dir := filepath.Join(m.root, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return resp, fmt.Errorf("create container dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	layers, err := m.images.Layers(ctx, img.ID)
	if err != nil {
		return resp, fmt.Errorf("open layers of %s: %w", img.ID, err)
	}
	if _, err := m.disks.EnsureBase(ctx, img.ID, layers); err != nil {
		return resp, fmt.Errorf("build base disk for %s: %w", img.ID, err)
	}
	if err := m.disks.NewUpper(ctx, filepath.Join(dir, upperFile), upperSize); err != nil {
		return resp, fmt.Errorf("create upper disk: %w", err)
	}
	fresh, err := rootfs.StampOf(filepath.Join(dir, upperFile))
	if err != nil {
		return resp, fmt.Errorf("create upper disk: %w", err)
	}
	path, args := entrypointAndArgs(cfg)
	rec := Record{
		ID: id, Name: name, Created: time.Now().UTC(), Image: req.Config.Image, ImageID: img.ID,
		Config: cfg, HostConfig: hc, Path: path, Args: args, Networks: nets, Mounts: mounts, LinkIDs: linkIDs,
		State: container.State{Status: container.StateCreated, StartedAt: zeroTime, FinishedAt: zeroTime}, FreshUpper: &fresh,
	}
	c, err := m.newCtr(dir, rec)
	if err != nil {
		return resp, err
	}
	if err := c.save(); err != nil {
		_ = c.log.Close()
		return resp, err
	}
	m.mu.Lock()
	m.byID[id] = c
	m.byName[name] = c
	m.mu.Unlock()
	c.emit(events.ActionCreate, nil)
	m.log.Info("container created", "id", id[:12], "name", name, "image", img.ID)
	return container.CreateResponse{ID: id, Warnings: createWarnings(hc)}, nil
}

const (
	upperFile = "upper.ext4"
	// zeroTime is how dockerd shows a time that has not happened.
	zeroTime = "0001-01-01T00:00:00Z"
)

// reserveName claims name for id, generating one when empty.
func (m *Manager) reserveName(name *string, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if *name == "" {
		for i := 0; ; i++ {
			candidate := generateName(i)
			if _, taken := m.byName[candidate]; !taken {
				*name = candidate
				break
			}
		}
	}
	if other, taken := m.byName[*name]; taken {
		otherID := id
		if other != nil {
			otherID = other.rec.ID
		}
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Conflict. The container name \"/%s\" is already in use by container \"%s\". You have to remove (or rename) that container to be able to reuse that name.", *name, otherID))
	}
	// A nil entry holds the name while the create is under way.
	m.byName[*name] = nil
	return nil
}

func (m *Manager) releaseName(name, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.byName[name]; ok && (c == nil || c.rec.ID == id) {
		delete(m.byName, name)
	}
}

func newID() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate container id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// mergeImageConfig applies the image's config under the user's, as dockerd's
// mergeAndVerifyConfig does.
func mergeImageConfig(user *container.Config, img v1.Config) *container.Config {
	cfg := *user
	if cfg.User == "" {
		cfg.User = img.User
	}
	if len(cfg.ExposedPorts) == 0 && len(img.ExposedPorts) > 0 {
		cfg.ExposedPorts = network.PortSet{}
	}
	for p := range img.ExposedPorts {
		if port, err := network.ParsePort(p); err == nil {
			if _, ok := cfg.ExposedPorts[port]; !ok {
				cfg.ExposedPorts[port] = struct{}{}
			}
		}
	}
	cfg.Env = mergeEnv(img.Env, user.Env)
	if len(img.Labels) > 0 {
		labels := map[string]string{}
		for k, v := range img.Labels {
			labels[k] = v
		}
		for k, v := range user.Labels {
			labels[k] = v
		}
		cfg.Labels = labels
	}
	if len(cfg.Entrypoint) == 0 {
		if len(cfg.Cmd) == 0 {
			cfg.Cmd = img.Cmd
		}
		if cfg.Entrypoint == nil {
			cfg.Entrypoint = img.Entrypoint
		}
	}
	// `--entrypoint ""` arrives as [""]: it clears the image's entrypoint.
	if len(cfg.Entrypoint) == 1 && cfg.Entrypoint[0] == "" {
		cfg.Entrypoint = nil
	}
	if cfg.WorkingDir == "" {
		cfg.WorkingDir = img.WorkingDir
	}
	if len(cfg.Volumes) == 0 && len(img.Volumes) > 0 {
		cfg.Volumes = map[string]struct{}{}
		for v := range img.Volumes {
			cfg.Volumes[v] = struct{}{}
		}
	}
	if cfg.StopSignal == "" {
		cfg.StopSignal = img.StopSignal
	}
	if img.Healthcheck != nil {
		cfg.Healthcheck = mergeHealthcheck(cfg.Healthcheck, &container.HealthConfig{
			Test: img.Healthcheck.Test, Interval: img.Healthcheck.Interval, Timeout: img.Healthcheck.Timeout,
			StartPeriod: img.Healthcheck.StartPeriod, Retries: img.Healthcheck.Retries,
		})
	}
	if len(cfg.Shell) == 0 {
		cfg.Shell = img.Shell
	}
	if len(cfg.OnBuild) == 0 {
		cfg.OnBuild = img.OnBuild
	}
	return &cfg
}

// mergeEnv overlays user's KEY=VALUE entries on the image's, keeping order.
func mergeEnv(image, user []string) []string {
	out := append([]string(nil), image...)
	index := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		index[k] = i
	}
	for _, kv := range user {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func entrypointAndArgs(cfg *container.Config) (string, []string) {
	argv := append(append([]string(nil), cfg.Entrypoint...), cfg.Cmd...)
	if len(argv) == 0 {
		return "", []string{}
	}
	return argv[0], append([]string{}, argv[1:]...)
}

// save persists the record atomically. Callers hold c.mu (or own c alone).
func (c *ctr) save() error {
	b, err := json.MarshalIndent(c.rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode container %s: %w", c.rec.ID, err)
	}
	if err := renameio.WriteFile(filepath.Join(c.dir, recordFile), b, 0o600); err != nil {
		return fmt.Errorf("save container %s: %w", c.rec.ID, err)
	}
	return syncDir(c.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Counts is the number of running, paused and stopped containers.
func (m *Manager) Counts() (running, paused, stopped int) {
	for _, c := range m.all() {
		c.mu.Lock()
		switch {
		case c.rec.State.Paused:
			paused++
		case c.rec.State.Running:
			running++
		default:
			stopped++
		}
		c.mu.Unlock()
	}
	return running, paused, stopped
}
