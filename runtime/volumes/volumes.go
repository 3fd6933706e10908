// Package volumes is the store of named and anonymous volumes for the
// "local" driver: each volume is a directory under the store's root whose
// _data subdirectory is what containers mount (served to the VM by
// virtio-fs). It answers the /volumes API and tracks which containers use
// which volume, so that an in-use volume is neither removed nor pruned.
//
// On disk, ROOT/NAME/volume.json is the record (written atomically) and
// ROOT/NAME/_data the content. A directory without a record is a create
// that never finished and is removed at start.
//
// A volume created with the local driver's type, device and o options
// (`-o type=none -o o=bind -o device=/srv/data`, `-o type=tmpfs ...`) has
// that filesystem mounted on its _data, as dockerd mounts it: when a
// container that uses it starts. dockerd unmounts it when the last such
// container stops; husk when the last such container is removed, since a
// container's stop has no hook into the store. So a tmpfs volume keeps
// its content across a restart of the container that uses it.
package volumes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/renameio/v2"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/volume"
	"github.com/moby/sys/mount"
	"github.com/moby/sys/mountinfo"
)

// DriverLocal is the only driver.
const DriverLocal = "local"

// AnonymousLabel marks a volume made for one container (docker run -v
// /path, or an image's VOLUME), as dockerd marks it; `docker volume
// prune` without --all removes only those.
const AnonymousLabel = "com.docker.volume.anonymous"

const (
	recordFile = "volume.json"
	dataDir    = "_data"
)

// validName is the local driver's rule for volume names.
var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// EventSink receives volume events; Publish must not block.
type EventSink interface {
	Publish(typ events.Type, action events.Action, id string, attrs map[string]string)
}

// Store holds every volume.
type Store struct {
	root   string
	log    *slog.Logger
	mount  mounter
	events EventSink // nil: no events

	mu   sync.Mutex
	vols map[string]*record
	// refs maps a volume name to the IDs of the containers using it.
	refs map[string]map[string]struct{}
	// active maps a volume name to the IDs of the running containers
	// that mounted it: as dockerd's local driver, a volume with mount
	// options is mounted while any of them runs.
	active map[string]map[string]struct{}
}

// record is one volume as persisted.
type record struct {
	Name      string
	Driver    string
	CreatedAt time.Time
	Labels    map[string]string `json:",omitempty"`
	Options   map[string]string `json:",omitempty"`
}

// New opens the store under root, creating it when missing. sink, when
// not nil, hears of each volume created, removed or pruned.
func New(root string, log *slog.Logger, sink EventSink) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("create volume root: %w", err)
	}
	s := &Store{root: root, log: log, mount: hostMounter{}, events: sink, vols: map[string]*record{}, refs: map[string]map[string]struct{}{},
		active: map[string]map[string]struct{}{}}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, recordFile))
		if errors.Is(err, fs.ErrNotExist) {
			log.Warn("removing incomplete volume", "dir", dir)
			if err := s.removeDir(dir); err != nil {
				log.Error("remove incomplete volume", "dir", dir, "err", err)
			}
			continue
		}
		var rec record
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil || rec.Name != e.Name() {
			log.Error("skipping unreadable volume record", "dir", dir, "err", err)
			continue
		}
		s.vols[rec.Name] = &rec
	}
	return s, nil
}

// Create makes a volume, or returns the existing one of that name.
func (s *Store) Create(ctx context.Context, req volume.CreateRequest) (volume.Volume, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.create(req)
	if err != nil {
		return volume.Volume{}, err
	}
	return s.toAPI(rec), nil
}

// create is Create with s.mu held.
func (s *Store) create(req volume.CreateRequest) (*record, error) {
	name := req.Name
	if name == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("generate volume name: %w", err)
		}
		name = hex.EncodeToString(b)
	}
	driver := req.Driver
	if driver == "" {
		driver = DriverLocal
	}
	if rec, ok := s.vols[name]; ok {
		if driver != rec.Driver {
			return nil, errdefs.ErrConflict.WithMessage(fmt.Sprintf("create %s: volume name must be unique", name))
		}
		// dockerd reports every create, of a volume that was there too
		// (as a container's -v NAME: makes it).
		s.publish(events.ActionCreate, name, map[string]string{"driver": rec.Driver})
		return rec, nil
	}
	if driver != DriverLocal {
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("create %s: error looking up volume plugin %s: plugin %q not found", name, driver, driver))
	}
	if len(name) == 1 {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("create %s: volume name is too short, names should be at least two alphanumeric characters", name))
	}
	if !validName.MatchString(name) {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("create %s: %q includes invalid characters for a local volume name, only \"[a-zA-Z0-9][a-zA-Z0-9_.-]\" are allowed. If you intended to pass a host directory, use absolute path", name, name))
	}
	if err := validateOptions(name, req.DriverOpts); err != nil {
		return nil, err
	}
	rec := &record{Name: name, Driver: driver, CreatedAt: time.Now().UTC().Truncate(time.Second),
		Labels: maps.Clone(req.Labels), Options: maps.Clone(req.DriverOpts)}
	dir := filepath.Join(s.root, name)
	// _data first and the record last: a crash in between leaves a
	// directory without a record, which New removes.
	if err := os.MkdirAll(filepath.Join(dir, dataDir), 0o755); err != nil {
		return nil, fmt.Errorf("create volume %s: %w", name, err)
	}
	if err := s.save(rec); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.vols[name] = rec
	s.publish(events.ActionCreate, name, map[string]string{"driver": rec.Driver})
	s.log.Info("volume created", "name", name)
	return rec, nil
}

// validateOptions checks the local driver's options as dockerd's does:
// type, device and o name a filesystem to mount, and each needs the
// others it cannot do without. size is a quota, which husk's volume
// directories cannot have.
func validateOptions(name string, opts map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		switch k {
		case "type", "device", "o":
		case "size":
			if opts[k] != "0" {
				return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("create %s: quota size requested but no quota support", name))
			}
		default:
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("create %s: invalid option: %q", name, k))
		}
	}
	for _, req := range []struct{ opt, needs string }{{"device", "type"}, {"type", "device"}, {"o", "device"}, {"o", "type"}} {
		if _, ok := opts[req.opt]; !ok {
			continue
		}
		if _, ok := opts[req.needs]; !ok {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("create %s: missing required option: %q", name, req.needs))
		}
	}
	return nil
}

// needsMount: the volume's content is a filesystem its options name.
func (rec *record) needsMount() bool {
	return rec.Options["type"] != "" || rec.Options["device"] != ""
}

// mounter mounts and unmounts volumes' filesystems; hostMounter is the
// real one.
type mounter interface {
	Mount(device, target, fsType, options string) error
	Unmount(target string) error
	Mounted(path string) (bool, error)
}

type hostMounter struct{}

func (hostMounter) Mount(device, target, fsType, options string) error {
	return mount.Mount(device, target, fsType, options)
}
func (hostMounter) Unmount(target string) error       { return mount.Unmount(target) }
func (hostMounter) Mounted(path string) (bool, error) { return mountinfo.Mounted(path) }

// Mount makes the named volume's content ready for container, which
// starts, and returns where it is: a volume with mount options gets its
// filesystem mounted on _data unless it already is (for another running
// container, or before the daemon restarted). Unmount gives it back.
func (s *Store) Mount(ctx context.Context, name, container string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.vols[name]
	if !ok {
		return "", noSuchVolume(name)
	}
	path := s.Mountpoint(name)
	if !rec.needsMount() {
		return path, nil
	}
	mounted, err := s.mount.Mounted(path)
	if err != nil {
		return "", fmt.Errorf("error while mounting volume '%s': %w", path, err)
	}
	if !mounted {
		if err := s.mount.Mount(rec.Options["device"], path, rec.Options["type"], rec.Options["o"]); err != nil {
			return "", fmt.Errorf("error while mounting volume '%s': failed to mount local volume: %w", path, err)
		}
		s.log.Info("volume mounted", "name", name, "type", rec.Options["type"], "device", rec.Options["device"])
	}
	if s.active[name] == nil {
		s.active[name] = map[string]struct{}{}
	}
	s.active[name][container] = struct{}{}
	return path, nil
}

// Unmount records that container, which mounted the volume, no longer
// runs; the last one to go unmounts what Mount mounted, so a tmpfs
// volume starts empty again as under dockerd. Giving back a volume
// container did not mount is how a daemon that restarts unmounts what
// no running container uses any more.
func (s *Store) Unmount(name, container string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.active[name], container)
	if len(s.active[name]) > 0 {
		return
	}
	delete(s.active, name)
	if rec, ok := s.vols[name]; ok && rec.needsMount() {
		if err := s.unmount(name); err != nil {
			s.log.Warn("unmount volume no running container uses", "name", name, "err", err)
		}
	}
}

// unmount undoes Mount with s.mu held, and makes sure nothing is mounted
// on _data any more: what is under it then is the volume's own (empty)
// directory, never the device a bind volume names.
func (s *Store) unmount(name string) error {
	if err := s.unmountPath(s.Mountpoint(name)); err != nil {
		return fmt.Errorf("unmount volume %s: %w", name, err)
	}
	return nil
}

// unmountPath unmounts path (not mounted is no error) and fails unless
// nothing is mounted there afterwards.
func (s *Store) unmountPath(path string) error {
	if err := s.mount.Unmount(path); err != nil {
		return err
	}
	if mounted, err := s.mount.Mounted(path); err != nil || mounted {
		return fmt.Errorf("%s is still mounted (%v)", path, err)
	}
	return nil
}

// removeDir removes a volume's directory unless something is still
// mounted on its _data: RemoveAll would go into the mounted filesystem
// and delete what a bind volume's device holds.
func (s *Store) removeDir(dir string) error {
	data := filepath.Join(dir, dataDir)
	if _, err := os.Lstat(data); err == nil {
		if err := s.unmountPath(data); err != nil {
			return err
		}
	}
	return os.RemoveAll(dir)
}

// publish reports a volume event as dockerd does: the volume's name and
// its driver.
func (s *Store) publish(action events.Action, name string, attrs map[string]string) {
	if s.events != nil {
		s.events.Publish(events.VolumeEventType, action, name, attrs)
	}
}

func (s *Store) save(rec *record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode volume %s: %w", rec.Name, err)
	}
	dir := filepath.Join(s.root, rec.Name)
	if err := renameio.WriteFile(filepath.Join(dir, recordFile), b, 0o600); err != nil {
		return fmt.Errorf("save volume %s: %w", rec.Name, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync volume %s: %w", rec.Name, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync volume %s: %w", rec.Name, err)
	}
	return nil
}

func (s *Store) toAPI(rec *record) volume.Volume {
	// No labels or options are null, as dockerd shows them.
	return volume.Volume{
		Name: rec.Name, Driver: rec.Driver, Mountpoint: s.Mountpoint(rec.Name),
		CreatedAt: rec.CreatedAt.Format(time.RFC3339), Labels: rec.Labels, Options: rec.Options, Scope: "local",
	}
}

// Mountpoint is where the named volume's content is on the host.
func (s *Store) Mountpoint(name string) string { return filepath.Join(s.root, name, dataDir) }

// Inspect returns the named volume.
func (s *Store) Inspect(ctx context.Context, name string) (volume.Volume, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.vols[name]
	if !ok {
		return volume.Volume{}, noSuchVolume(name)
	}
	return s.toAPI(rec), nil
}

func noSuchVolume(name string) error {
	return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("get %s: no such volume", name))
}

// listFilters are the filters GET /volumes takes.
var listFilters = map[string]bool{"dangling": true, "driver": true, "label": true, "name": true}

// List answers GET /volumes.
func (s *Store) List(ctx context.Context, filters map[string][]string) (volume.ListResponse, error) {
	for k := range filters {
		if !listFilters[k] {
			return volume.ListResponse{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter '%s'", k))
		}
	}
	dangling, hasDangling := filters["dangling"]
	danglingOnly := false
	if hasDangling {
		// As dockerd's GetBoolOrDefault: true or false, not both.
		isTrue := slices.Contains(dangling, "true") || slices.Contains(dangling, "1")
		isFalse := slices.Contains(dangling, "false") || slices.Contains(dangling, "0")
		if isTrue == isFalse {
			return volume.ListResponse{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter 'dangling=%v'", dangling))
		}
		danglingOnly = isTrue
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := volume.ListResponse{Volumes: []volume.Volume{}, Warnings: []string{}}
	for _, name := range s.sortedNames() {
		rec := s.vols[name]
		if s.matches(rec, filters) && (!hasDangling || danglingOnly == (len(s.refs[rec.Name]) == 0)) {
			out.Volumes = append(out.Volumes, s.toAPI(rec))
		}
	}
	return out, nil
}

func (s *Store) sortedNames() []string {
	names := slices.Collect(maps.Keys(s.vols))
	sort.Strings(names)
	return names
}

// matches applies list filters: values of one key are alternatives, keys
// must all match; labels must all match.
func (s *Store) matches(rec *record, filters map[string][]string) bool {
	anyOf := func(key string, ok func(string) bool) bool {
		vals := filters[key]
		if len(vals) == 0 {
			return true
		}
		return slices.ContainsFunc(vals, ok)
	}
	return anyOf("name", func(v string) bool { return matchPattern(v, rec.Name) }) &&
		anyOf("driver", func(v string) bool { return rec.Driver == v }) &&
		labelsMatch(filters["label"], rec.Labels, true) &&
		labelsMatch(filters["label!"], rec.Labels, false)
}

// matchPattern is dockerd's name filter: the value itself, or a regular
// expression found in the name.
func matchPattern(pattern, s string) bool {
	if pattern == s {
		return true
	}
	re, err := regexp.Compile(pattern)
	return err == nil && re.MatchString(s)
}

// labelsMatch: with want, every "k" or "k=v" must be present; without,
// none may be.
func labelsMatch(exprs []string, labels map[string]string, want bool) bool {
	for _, e := range exprs {
		k, v, hasValue := strings.Cut(e, "=")
		got, ok := labels[k]
		has := ok && (!hasValue || got == v)
		if has != want {
			return false
		}
	}
	return true
}

// Remove deletes the named volume. An in-use volume is refused, even with
// force; force only makes a missing volume no error.
func (s *Store) Remove(ctx context.Context, name string, force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.vols[name]; !ok {
		if force {
			return nil
		}
		return noSuchVolume(name)
	}
	if users := s.users(name); len(users) > 0 {
		return errdefs.ErrConflict.WithMessage(fmt.Sprintf("remove %s: volume is in use - [%s]", name, strings.Join(users, ", ")))
	}
	return s.remove(name)
}

// remove deletes a volume with s.mu held: the record first, so a crash
// leaves a directory New cleans up, never a record without its data.
func (s *Store) remove(name string) error {
	dir := filepath.Join(s.root, name)
	if s.vols[name].needsMount() {
		if err := s.unmount(name); err != nil {
			return fmt.Errorf("remove %s: %w", name, err)
		}
	}
	if err := os.Remove(filepath.Join(dir, recordFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	driver := s.vols[name].Driver
	delete(s.vols, name)
	delete(s.refs, name)
	delete(s.active, name)
	if err := s.removeDir(dir); err != nil {
		s.log.Warn("remove volume data", "name", name, "err", err)
	}
	s.publish(events.ActionDestroy, name, map[string]string{"driver": driver})
	s.log.Info("volume removed", "name", name)
	return nil
}

var pruneFilters = map[string]bool{"label": true, "label!": true, "all": true}

// Prune removes unused volumes: anonymous ones only, unless the filter
// all=true (API 1.42 and later) asks for named ones too.
func (s *Store) Prune(ctx context.Context, filters map[string][]string) (volume.PruneReport, error) {
	for k := range filters {
		if !pruneFilters[k] {
			return volume.PruneReport{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter '%s'", k))
		}
	}
	all := false
	switch vs := filters["all"]; len(vs) {
	case 0:
	case 1:
		var err error
		if all, err = strconv.ParseBool(vs[0]); err != nil {
			return volume.PruneReport{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter 'all': %v", err))
		}
	default:
		return volume.PruneReport{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid filter 'all=%s': only one value is expected", vs))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	report := volume.PruneReport{VolumesDeleted: []string{}}
	for _, name := range s.sortedNames() {
		rec := s.vols[name]
		if len(s.refs[name]) > 0 {
			continue
		}
		if _, anon := rec.Labels[AnonymousLabel]; !anon && !all {
			continue
		}
		if !labelsMatch(filters["label"], rec.Labels, true) || !labelsMatch(filters["label!"], rec.Labels, false) {
			continue
		}
		size := diskUsage(s.Mountpoint(name))
		if err := s.remove(name); err != nil {
			return report, err
		}
		report.VolumesDeleted = append(report.VolumesDeleted, name)
		report.SpaceReclaimed += uint64(size)
	}
	s.publish(events.ActionPrune, "", map[string]string{"reclaimed": strconv.FormatUint(report.SpaceReclaimed, 10)})
	return report, nil
}

// diskUsage is the bytes allocated under dir, as du counts them.
func diskUsage(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			total += info.Size()
		}
		return nil
	})
	return total
}

// Use makes sure the named volume exists (creating it as req describes
// when it does not) and records that container uses it, in one step, so
// no removal or prune can come in between. An empty req.Name makes an
// anonymous volume.
func (s *Store) Use(ctx context.Context, req volume.CreateRequest, container string) (volume.Volume, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Name == "" {
		req.Labels = maps.Clone(req.Labels)
		if req.Labels == nil {
			req.Labels = map[string]string{}
		}
		req.Labels[AnonymousLabel] = ""
	}
	rec, err := s.create(req)
	if err != nil {
		return volume.Volume{}, err
	}
	s.ref(rec.Name, container)
	return s.toAPI(rec), nil
}

// Acquire records that container uses the existing volume name (on daemon
// start, from the container records).
func (s *Store) Acquire(name, container string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.vols[name]; !ok {
		return noSuchVolume(name)
	}
	s.ref(name, container)
	return nil
}

func (s *Store) ref(name, container string) {
	if s.refs[name] == nil {
		s.refs[name] = map[string]struct{}{}
	}
	s.refs[name][container] = struct{}{}
}

// Release records that container, removed, no longer uses the volume.
func (s *Store) Release(name, container string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.refs[name], container)
	if len(s.refs[name]) == 0 {
		delete(s.refs, name)
	}
}

// Users lists the IDs of the containers that use the volume.
func (s *Store) Users(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.users(name)
}

func (s *Store) users(name string) []string {
	users := slices.Collect(maps.Keys(s.refs[name]))
	sort.Strings(users)
	return users
}
