package containers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/volume"

	"github.com/husk-vm/husk/runtime/virtiofs"
	"github.com/husk-vm/husk/runtime/vmm"
	"github.com/husk-vm/husk/shim/proto"
)

// Volumes is the volume store as the runtime needs it; *volumes.Store is
// the real one.
type Volumes interface {
	// Use creates the volume when missing (an empty name makes an
	// anonymous one) and records that the container uses it.
	Use(ctx context.Context, req volume.CreateRequest, containerID string) (volume.Volume, error)
	// Mount readies a volume for a start (mounting what its options
	// name) and returns where its content is; Unmount gives it back
	// when that run ends.
	Mount(ctx context.Context, name, containerID string) (string, error)
	Unmount(name, containerID string)
	Acquire(name, containerID string) error
	Release(name, containerID string)
	Remove(ctx context.Context, name string, force bool) error
}

// Mount is one of a container's mounts as recorded at create. Bind and
// volume mounts reach the VM through virtio-fs (one virtiofsd each);
// tmpfs mounts are made by the agent.
type Mount struct {
	// MountPoint is what inspect shows.
	container.MountPoint
	// Anonymous marks a volume made for this container: `docker rm -v`
	// and --rm remove it.
	Anonymous bool `json:",omitempty"`
	// Options are a tmpfs's flags and data ("noexec", "size=64m").
	Options []string `json:",omitempty"`
	// CopyUp fills an empty volume from the image at its next start;
	// cleared once a start has done it.
	CopyUp bool `json:",omitempty"`
	// CreateSource makes a missing bind source directory at start, as
	// dockerd does for -v (not for --mount).
	CreateSource bool `json:",omitempty"`
	// Hidden keeps a mount out of inspect's Mounts, where dockerd does
	// not show it (--tmpfs).
	Hidden bool `json:",omitempty"`
	// Socket: the bind source was a unix socket at the last start, so
	// the guest got a socket huskd forwards to it (sockets.go) rather
	// than a virtio-fs share.
	Socket bool `json:",omitempty"`
	// Subpath is --mount's volume-subpath: what of the volume is mounted,
	// relative to its root.
	Subpath string `json:",omitempty"`

	// volumeOpts and volumeLabels are --mount's volume-opt and
	// volume-label: what a volume the create makes is made with.
	volumeOpts, volumeLabels map[string]string
}

// shared reports whether the mount is served by virtio-fs.
func (m Mount) shared() bool {
	return m.Type == mount.TypeBind || m.Type == mount.TypeVolume
}

// HasSharedMounts reports whether the container has host files mounted
// through virtio-fs: such a VM's state includes virtiofsd's, so it cannot
// be checkpointed (QEMU also refuses to migrate a vhost-user-fs device).
func (r Record) HasSharedMounts() bool {
	for _, m := range r.Mounts {
		if m.shared() {
			return true
		}
	}
	return false
}

// Mount modes of -v, as dockerd's Linux parser knows them.
var (
	rwModes          = map[string]bool{"rw": true, "ro": true, "ro-non-recursive": true, "ro-force-recursive": true, "rro": true}
	labelModes       = map[string]bool{"z": true, "Z": true}
	propagationModes = map[string]bool{"private": true, "rprivate": true, "slave": true, "rslave": true, "shared": true, "rshared": true}
	copyModes        = map[string]bool{"nocopy": true}
	consistencyModes = map[string]bool{"consistent": true, "cached": true, "delegated": true}
)

// validMode checks a -v mode: known words, at most one of each kind.
func validMode(mode string) bool {
	if mode == "" {
		return true
	}
	counts := map[string]int{}
	for _, o := range strings.Split(mode, ",") {
		switch {
		case rwModes[o]:
			counts["rw"]++
		case labelModes[o]:
			counts["label"]++
		case propagationModes[o]:
			counts["propagation"]++
		case copyModes[o]:
			counts["copy"]++
		case consistencyModes[o]:
			counts["consistency"]++
		default:
			return false
		}
	}
	for _, n := range counts {
		if n > 1 {
			return false
		}
	}
	return true
}

func modeHas(mode string, set map[string]bool) string {
	for _, o := range strings.Split(mode, ",") {
		if set[o] {
			return o
		}
	}
	return ""
}

// mountConfigError is dockerd's errMountConfig wording.
func mountConfigError(t mount.Type, err error) error {
	return fmt.Errorf("invalid mount config for type %q: %w", t, err)
}

// validateTarget applies dockerd's checks on a mount destination.
func validateTarget(target string) error {
	if path.Clean(target) == "/" {
		return errors.New("invalid specification: destination can't be '/'")
	}
	if !path.IsAbs(target) {
		return fmt.Errorf("invalid mount path: '%s' mount path must be absolute", target)
	}
	return nil
}

// parseBind parses one -v / HostConfig.Binds entry.
func parseBind(raw string) (Mount, error) {
	invalid := func() error {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid volume specification: '%s'", raw))
	}
	arr := strings.SplitN(raw, ":", 4)
	if arr[0] == "" {
		return Mount{}, invalid()
	}
	var src, dst, mode string
	switch len(arr) {
	case 1:
		dst = arr[0]
	case 2:
		if validMode(arr[1]) {
			// "/foo:rw" is a destination with a mode and no source.
			return Mount{}, invalid()
		}
		src, dst = arr[0], arr[1]
	case 3:
		src, dst, mode = arr[0], arr[1], arr[2]
	default:
		return Mount{}, invalid()
	}
	if !validMode(mode) {
		return Mount{}, errdefs.ErrInvalidArgument.WithMessage("invalid mode: " + mode)
	}
	m := Mount{MountPoint: container.MountPoint{Type: mount.TypeVolume, Destination: path.Clean(dst), Mode: mode,
		RW: modeHas(mode, rwModes) == "" || modeHas(mode, rwModes) == "rw"}}
	if path.IsAbs(src) {
		m.Type = mount.TypeBind
	}
	if err := validateTarget(dst); err != nil {
		return Mount{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid volume specification: '%s': %v", raw, mountConfigError(m.Type, err)))
	}
	switch m.Type {
	case mount.TypeBind:
		m.Source = path.Clean(src)
		m.Propagation = mount.PropagationRPrivate
		if p := modeHas(mode, propagationModes); p != "" {
			m.Propagation = mount.Propagation(p)
		}
		m.CreateSource = true
	case mount.TypeVolume:
		m.Name = src
		m.Driver = "local"
		m.CopyUp = modeHas(mode, copyModes) == ""
		m.Anonymous = src == ""
		if mode == "" && src != "" {
			// What dockerd shows for a named volume given with -v.
			m.Mode = "z"
		}
	}
	return m, nil
}

// parseMountSpec parses one --mount / HostConfig.Mounts entry. exists
// reports whether a bind source is there.
func parseMountSpec(spec mount.Mount, exists func(string) bool) (Mount, error) {
	bad := func(err error) (Mount, error) {
		return Mount{}, errdefs.ErrInvalidArgument.WithMessage(mountConfigError(spec.Type, err).Error())
	}
	if spec.Target == "" {
		return bad(errors.New("field Target must not be empty"))
	}
	if err := validateTarget(spec.Target); err != nil {
		return bad(err)
	}
	m := Mount{MountPoint: container.MountPoint{Type: spec.Type, Destination: path.Clean(spec.Target), RW: !spec.ReadOnly}}
	switch spec.Type {
	case mount.TypeBind:
		if spec.Source == "" {
			return bad(errors.New("field Source must not be empty"))
		}
		if spec.VolumeOptions != nil {
			return bad(errors.New("field VolumeOptions must not be specified"))
		}
		if !path.IsAbs(spec.Source) {
			return bad(fmt.Errorf("invalid mount path: '%s' mount path must be absolute", spec.Source))
		}
		m.Source = path.Clean(spec.Source)
		m.Propagation = mount.PropagationRPrivate
		if o := spec.BindOptions; o != nil {
			if o.Propagation != "" {
				if !propagationModes[string(o.Propagation)] {
					return bad(fmt.Errorf("invalid propagation mode: %s", o.Propagation))
				}
				m.Propagation = o.Propagation
			}
			m.CreateSource = o.CreateMountpoint
		}
		if !m.CreateSource && !exists(m.Source) {
			return bad(fmt.Errorf("bind source path does not exist: %s", m.Source))
		}
	case mount.TypeVolume:
		if spec.BindOptions != nil {
			return bad(errors.New("field BindOptions must not be specified"))
		}
		m.Name, m.Driver, m.Anonymous, m.CopyUp = spec.Source, "local", spec.Source == "", true
		if spec.ReadOnly && m.Anonymous {
			return bad(errors.New("must not set ReadOnly mode when using anonymous volumes"))
		}
		if o := spec.VolumeOptions; o != nil {
			if o.Subpath != "" {
				if m.Anonymous {
					return bad(errors.New("must not set Subpath when using anonymous volumes"))
				}
				if !filepath.IsLocal(o.Subpath) {
					return bad(errors.New("subpath must be a relative path within the volume"))
				}
				m.Subpath = o.Subpath
			}
			if o.DriverConfig != nil && o.DriverConfig.Name != "" {
				m.Driver = o.DriverConfig.Name
			}
			if o.DriverConfig != nil {
				m.volumeOpts = o.DriverConfig.Options
			}
			m.volumeLabels = o.Labels
			m.CopyUp = !o.NoCopy
		}
	case mount.TypeTmpfs:
		if spec.BindOptions != nil {
			return bad(errors.New("field BindOptions must not be specified"))
		}
		if spec.Source != "" {
			return bad(errors.New("field Source must not be specified"))
		}
		opts, err := tmpfsOptions(spec.TmpfsOptions, spec.ReadOnly)
		if err != nil {
			return bad(err)
		}
		m.Options = opts
	default:
		return bad(errors.New("mount type unknown"))
	}
	return m, nil
}

// defaultTmpfsFlags are what dockerd gives every tmpfs before the user's
// options.
var defaultTmpfsFlags = []string{"noexec", "nosuid", "nodev"}

// tmpfsOptions turns --mount's tmpfs options into mount options.
func tmpfsOptions(o *mount.TmpfsOptions, readOnly bool) ([]string, error) {
	opts := append([]string(nil), defaultTmpfsFlags...)
	if readOnly {
		opts = append(opts, "ro")
	}
	if o == nil {
		return opts, nil
	}
	if o.Mode != 0 {
		// The CLI parses tmpfs-mode as octal chmod bits, not Go's mode
		// bits, and dockerd prints them back as such.
		opts = append(opts, fmt.Sprintf("mode=%o", uint32(o.Mode)))
	}
	if o.SizeBytes != 0 {
		size, suffix := o.SizeBytes, ""
		for _, u := range []struct {
			suffix string
			div    int64
		}{{"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
			if size%u.div == 0 {
				size, suffix = size/u.div, u.suffix
				break
			}
		}
		opts = append(opts, fmt.Sprintf("size=%d%s", size, suffix))
	}
	for _, kv := range o.Options {
		if len(kv) < 1 || len(kv) > 2 {
			return nil, errors.New("invalid option array length")
		}
		if kv[0] != "exec" && kv[0] != "noexec" {
			return nil, errors.New("invalid option: " + kv[0])
		}
		opts = append(opts, strings.Join(kv, "="))
	}
	return opts, nil
}

// planMounts gathers a create request's mounts: those inherited from
// --volumes-from (which -v and --mount replace at the same destination,
// as dockerd's do), -v binds, --mount specs, --tmpfs, then the anonymous
// volumes the config (or image) declares at destinations nothing else
// covers. Parents come before what is mounted in them.
func planMounts(cfg *container.Config, hc *container.HostConfig, inherited []Mount, exists func(string) bool) ([]Mount, error) {
	var out []Mount
	seen := map[string]bool{}
	inheritedAt := map[string]int{}
	for _, m := range inherited {
		if i, ok := inheritedAt[m.Destination]; ok {
			out[i] = m // the later container's, as dockerd's map keeps it
			continue
		}
		inheritedAt[m.Destination] = len(out)
		out = append(out, m)
	}
	add := func(m Mount) error {
		if seen[m.Destination] {
			return errdefs.ErrInvalidArgument.WithMessage("Duplicate mount point: " + m.Destination)
		}
		seen[m.Destination] = true
		if i, ok := inheritedAt[m.Destination]; ok {
			out[i] = m
			return nil
		}
		out = append(out, m)
		return nil
	}
	for _, raw := range hc.Binds {
		m, err := parseBind(raw)
		if err != nil {
			return nil, err
		}
		if m.Type == mount.TypeVolume && hc.VolumeDriver != "" {
			m.Driver = hc.VolumeDriver
		}
		if err := add(m); err != nil {
			return nil, err
		}
	}
	for _, spec := range hc.Mounts {
		m, err := parseMountSpec(spec, exists)
		if err != nil {
			return nil, err
		}
		if err := add(m); err != nil {
			return nil, err
		}
	}
	for d := range inheritedAt {
		seen[d] = true
	}
	dests := make([]string, 0, len(hc.Tmpfs))
	for d := range hc.Tmpfs {
		dests = append(dests, d)
	}
	sort.Strings(dests)
	for _, d := range dests {
		if err := validateTarget(d); err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error()) // dockerd says no more
		}
		opts := append([]string(nil), defaultTmpfsFlags...)
		if data := hc.Tmpfs[d]; data != "" {
			opts = append(opts, strings.Split(data, ",")...)
		}
		if err := add(Mount{MountPoint: container.MountPoint{Type: mount.TypeTmpfs, Destination: path.Clean(d), RW: true},
			Options: opts, Hidden: true}); err != nil {
			return nil, err
		}
	}
	vols := make([]string, 0, len(cfg.Volumes))
	for d := range cfg.Volumes {
		vols = append(vols, d)
	}
	sort.Strings(vols)
	for _, d := range vols {
		if seen[path.Clean(d)] {
			continue
		}
		if err := validateTarget(d); err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid volume specification: '%s': %v", d, mountConfigError(mount.TypeVolume, err)))
		}
		_ = add(Mount{MountPoint: container.MountPoint{Type: mount.TypeVolume, Destination: path.Clean(d), Driver: "local", RW: true},
			Anonymous: true, CopyUp: true})
	}
	sort.SliceStable(out, func(i, j int) bool { return depth(out[i].Destination) < depth(out[j].Destination) })
	return out, nil
}

func depth(p string) int { return strings.Count(path.Clean(p), "/") }

// useVolumes creates (or finds) each volume mount's volume and records
// the container as its user. On error, what it took is given back.
func (m *Manager) useVolumes(ctx context.Context, id string, mounts []Mount) (err error) {
	var taken []Mount
	defer func() {
		if err != nil {
			m.releaseVolumes(context.WithoutCancel(ctx), id, taken, true)
		}
	}()
	for i := range mounts {
		mp := &mounts[i]
		if mp.Type != mount.TypeVolume {
			continue
		}
		if m.volumes == nil {
			return errdefs.ErrNotImplemented.WithMessage("this daemon has no volumes")
		}
		v, err := m.volumes.Use(ctx, volume.CreateRequest{Name: mp.Name, Driver: mp.Driver, DriverOpts: mp.volumeOpts, Labels: mp.volumeLabels}, id)
		if err != nil {
			return err
		}
		mp.Name, mp.Source, mp.Driver = v.Name, v.Mountpoint, v.Driver
		taken = append(taken, *mp)
	}
	return nil
}

// releaseVolumes gives back the container's volumes, and removes its
// anonymous ones when removeAnonymous is set.
func (m *Manager) releaseVolumes(ctx context.Context, id string, mounts []Mount, removeAnonymous bool) {
	if m.volumes == nil {
		return
	}
	for _, mp := range mounts {
		if mp.Type != mount.TypeVolume || mp.Name == "" {
			continue
		}
		m.volumes.Release(mp.Name, id)
		if removeAnonymous && mp.Anonymous {
			if err := m.volumes.Remove(ctx, mp.Name, false); err != nil && !errdefs.IsNotFound(err) {
				m.log.Warn("remove anonymous volume", "volume", mp.Name, "container", id[:12], "err", err)
			}
		}
	}
}

// acquireVolumes re-records, at daemon start, which volumes a container
// uses.
func (m *Manager) acquireVolumes(rec Record) {
	if m.volumes == nil {
		return
	}
	for _, mp := range rec.Mounts {
		if mp.Type != mount.TypeVolume {
			continue
		}
		if err := m.volumes.Acquire(mp.Name, rec.ID); err != nil {
			m.log.Warn("container's volume is gone", "container", rec.ID[:12], "volume", mp.Name, "err", err)
		}
	}
}

// mountPoints is inspect's Mounts.
func mountPoints(mounts []Mount) []container.MountPoint {
	out := []container.MountPoint{}
	for _, m := range mounts {
		if !m.Hidden {
			out = append(out, m.MountPoint)
		}
	}
	return out
}

// shares is one boot's virtiofsd processes, and the named volumes
// mounted for it, given back to the store once its servers are gone.
type shares struct {
	servers []*virtiofs.Server
	volumes []string
	unmount func(name string)
}

// startShares starts one virtiofsd per bind and volume mount in vmDir and
// returns the VM's devices and the agent's mount list. On error nothing is
// left running. Callers hold c.mu.
func (c *ctr) startShares(ctx context.Context, vmDir string) (_ *shares, _ []vmm.Share, _ []proto.MountSpec, err error) {
	sh := c.newShares()
	defer func() {
		if err != nil {
			sh.kill(c.m.log)
		}
	}()
	var devs []vmm.Share
	var specs []proto.MountSpec
	for i, mp := range c.rec.Mounts {
		if mp.Type == mount.TypeTmpfs {
			specs = append(specs, proto.MountSpec{Type: proto.MountTmpfs, Target: mp.Destination, ReadOnly: !mp.RW, Options: mp.Options})
			continue
		}
		if !mp.shared() {
			continue
		}
		src := mp.Source
		if mp.Type == mount.TypeVolume && mp.Name != "" && c.m.volumes != nil {
			if src, err = c.m.volumes.Mount(ctx, mp.Name, c.rec.ID); err != nil {
				return nil, nil, nil, err
			}
			sh.volumes = append(sh.volumes, mp.Name)
		}
		st, err := os.Stat(src)
		if errors.Is(err, fs.ErrNotExist) && mp.CreateSource {
			if err := os.MkdirAll(src, 0o755); err != nil {
				return nil, nil, nil, fmt.Errorf("create bind source %s: %w", src, err)
			}
			st, err = os.Stat(src)
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && mp.Type == mount.TypeBind {
				return nil, nil, nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid mount config for type \"bind\": bind source path does not exist: %s", src))
			}
			return nil, nil, nil, fmt.Errorf("mount source %s: %w", src, err)
		}
		c.rec.Mounts[i].Socket = mp.Type == mount.TypeBind && st.Mode()&fs.ModeSocket != 0
		if c.rec.Mounts[i].Socket {
			specs = append(specs, proto.MountSpec{Type: proto.MountSocket, Tag: socketTag(i), Target: mp.Destination})
			continue
		}
		n := len(sh.servers)
		name, tag := fmt.Sprintf("fs%d", n), fmt.Sprintf("husk%d", n)
		srv, err := virtiofs.Start(ctx, vmDir, virtiofs.Share{Name: name, Source: src, ReadOnly: !mp.RW},
			virtiofs.Options{Binary: c.m.guest.Virtiofsd, Logger: c.m.log.With("container", c.rec.ID[:12])})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("share %s: %w", src, err)
		}
		sh.servers = append(sh.servers, srv)
		devs = append(devs, vmm.Share{Tag: tag, Socket: srv.Socket()})
		spec := proto.MountSpec{Type: proto.MountVirtiofs, Tag: tag, Target: mp.Destination, ReadOnly: !mp.RW,
			CopyUp: mp.CopyUp && mp.Type == mount.TypeVolume}
		switch {
		case !st.IsDir():
			spec.Path = virtiofs.FileName
		case mp.Subpath != "":
			if spec.Path, err = volumeSubpath(src, mp.Subpath); err != nil {
				return nil, nil, nil, err
			}
		}
		specs = append(specs, spec)
	}
	return sh, devs, specs, nil
}

// findShares finds the virtiofsd processes a previous daemon started in
// vmDir.
func (m *Manager) findShares(vmDir string) *shares {
	sh := &shares{}
	for _, name := range virtiofs.Names(vmDir) {
		srv, err := virtiofs.Find(vmDir, name, m.log)
		if err != nil {
			m.log.Warn("virtiofsd of a surviving VM is gone", "dir", vmDir, "share", name, "err", err)
			continue
		}
		sh.servers = append(sh.servers, srv)
	}
	return sh
}

// adoptShares is the shares of c's VM that a previous daemon started,
// with its volumes mounted again for c: they are given back when the VM
// ends, as a boot's are. Callers hold c.mu.
func (c *ctr) adoptShares(ctx context.Context) *shares {
	found := c.m.findShares(c.rec.VMDir)
	sh := c.newShares()
	sh.servers = found.servers
	if c.m.volumes == nil {
		return sh
	}
	for _, name := range c.volumeNames() {
		if _, err := c.m.volumes.Mount(ctx, name, c.rec.ID); err != nil {
			c.m.log.Warn("mount the volume of a container that survived the restart", "id", c.rec.ID[:12], "volume", name, "err", err)
			continue
		}
		sh.volumes = append(sh.volumes, name)
	}
	return sh
}

// shareGrace is how long virtiofsd gets to exit by itself once its VMM
// has gone.
const shareGrace = 5 * time.Second

// newShares is an empty set of shares for a boot of c.
func (c *ctr) newShares() *shares {
	sh := &shares{}
	if c.m.volumes != nil {
		id := c.rec.ID
		sh.unmount = func(name string) { c.m.volumes.Unmount(name, id) }
	}
	return sh
}

// volumeNames lists the named volumes a boot of c mounts.
func (c *ctr) volumeNames() []string {
	var names []string
	for _, mp := range c.rec.Mounts {
		if mp.Type == mount.TypeVolume && mp.Name != "" && mp.shared() {
			names = append(names, mp.Name)
		}
	}
	return names
}

// stop waits for each virtiofsd to exit after its VMM and removes its
// files, then gives the volumes back; nil is a boot without shares.
func (sh *shares) stop(log *slog.Logger) {
	if sh == nil {
		return
	}
	for _, s := range sh.servers {
		if err := s.Stop(shareGrace); err != nil {
			log.Warn("stop virtiofsd", "pid", s.PID(), "err", err)
		}
	}
	sh.servers = nil
	sh.giveBack()
}

// giveBack tells the volume store the boot no longer uses its volumes.
func (sh *shares) giveBack() {
	if sh.unmount != nil {
		for _, name := range sh.volumes {
			sh.unmount(name)
		}
	}
	sh.volumes = nil
}

func (sh *shares) pids() []int {
	var pids []int
	for _, s := range sh.servers {
		pids = append(pids, s.PID())
	}
	return pids
}

// kill kills each virtiofsd and gives the volumes back.
func (sh *shares) kill(log *slog.Logger) {
	if sh == nil {
		return
	}
	sh.killServers(log)
	sh.giveBack()
}

// killServers kills each virtiofsd, keeping the volumes for a second
// set of servers (a boot that falls back from a template).
func (sh *shares) killServers(log *slog.Logger) {
	for _, s := range sh.servers {
		if err := s.Kill(); err != nil {
			log.Warn("kill virtiofsd", "pid", s.PID(), "err", err)
		}
	}
	sh.servers = nil
}

// copiedUp clears the copy-up marks once a boot has done them. Callers
// hold c.mu.
func (c *ctr) copiedUp() {
	changed := false
	for i := range c.rec.Mounts {
		if c.rec.Mounts[i].CopyUp {
			c.rec.Mounts[i].CopyUp = false
			changed = true
		}
	}
	if changed {
		if err := c.save(); err != nil {
			c.m.log.Warn("persist copy-up", "id", c.rec.ID[:12], "err", err)
		}
	}
}

// bindExists is what --mount checks of a bind source at create.
func bindExists(p string) bool {
	_, err := os.Stat(filepath.Clean(p))
	return err == nil
}

// parseVolumesFrom reads one --volumes-from value, "container[:mode]",
// as dockerd's ParseVolumesFrom does: the mode is ro or rw, with a
// relabelling (z, Z) that means nothing in a VM beside it.
func parseVolumesFrom(spec string) (ref string, readOnly bool, _ error) {
	if spec == "" {
		return "", false, errdefs.ErrInvalidArgument.WithMessage("volumes-from specification cannot be an empty string")
	}
	ref, mode, _ := strings.Cut(spec, ":")
	if mode == "" {
		return ref, false, nil
	}
	rw := 0
	for _, o := range strings.Split(mode, ",") {
		switch o {
		case "ro":
			readOnly = true
			rw++
		case "rw":
			rw++
		case "z", "Z":
		default:
			return "", false, errdefs.ErrInvalidArgument.WithMessage("invalid mode: " + mode)
		}
	}
	if rw > 1 {
		return "", false, errdefs.ErrInvalidArgument.WithMessage("invalid mode: " + mode)
	}
	return ref, readOnly, nil
}

// volumesFrom are the mounts --volumes-from copies from other containers:
// each of their volumes, binds and --mount tmpfs mounts (not --tmpfs,
// which dockerd does not record as a mount point), read-only where the
// source's is or the mode says ro. The volumes are shared, not the new
// container's own: its removal does not take them.
func (m *Manager) volumesFrom(specs []string) ([]Mount, error) {
	var out []Mount
	for _, spec := range specs {
		ref, readOnly, err := parseVolumesFrom(spec)
		if err != nil {
			return nil, err
		}
		src, err := m.lookup(ref)
		if errdefs.IsNotFound(err) {
			// A 400, as dockerd answers: a 404 from create makes the
			// CLI pull the image and try again.
			return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
		if err != nil {
			return nil, err
		}
		src.mu.Lock()
		mounts := slices.Clone(src.rec.Mounts)
		src.mu.Unlock()
		for _, mt := range mounts {
			if mt.Hidden {
				continue
			}
			mt.RW = mt.RW && !readOnly
			mt.Mode = ""
			mt.Anonymous, mt.CopyUp, mt.CreateSource, mt.Socket = false, false, false, false
			out = append(out, mt)
		}
	}
	return out, nil
}

// volumeSubpath resolves a volume-subpath in the volume at base as dockerd
// does: symlinks inside the volume are followed as long as the result
// stays in it, and what it names must exist. The whole volume is shared
// with the guest, whose agent opens the resolved path refusing symlinks,
// so one swapped in meanwhile cannot lead it out of the volume.
func volumeSubpath(base, subpath string) (string, error) {
	resolvedBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return "", fmt.Errorf("volume %s: %w", base, err)
	}
	combined := filepath.Join(resolvedBase, subpath)
	resolved, err := filepath.EvalSymlinks(combined)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", errdefs.ErrNotFound.WithMessage(fmt.Sprintf("cannot access path %s: %v", combined, err))
		}
		return "", fmt.Errorf("error while resolving symlinks in combined path %q: %w", combined, err)
	}
	rel, err := filepath.Rel(resolvedBase, resolved)
	if err != nil || !filepath.IsLocal(rel) {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("path concatenation escapes the base directory, base: %s, subpath: %s", resolvedBase, subpath))
	}
	return rel, nil
}
