package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/api/types/system"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/apicompat"
	"github.com/husk-vm/husk/imagebuild"
	"github.com/husk-vm/husk/imagebuild/builder"
	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/rootfs"
	"github.com/husk-vm/husk/runtime/containers"
	huskevents "github.com/husk-vm/husk/runtime/events"
	"github.com/husk-vm/husk/shim/proto"
)

// imageSource is the image store as the runtime sees it.
type imageSource struct{ s *imagebuild.Service }

func (a imageSource) Resolve(ctx context.Context, ref string) (containers.Image, error) {
	img, err := a.s.Resolve(ctx, ref)
	if err != nil {
		return containers.Image{}, err
	}
	return containers.Image{ID: img.ID, Config: img.Config.Config}, nil
}

func (a imageSource) Layers(ctx context.Context, imageID string) ([]rootfs.LayerOpener, error) {
	openers, err := a.s.Layers(ctx, imageID)
	if err != nil {
		return nil, err
	}
	out := make([]rootfs.LayerOpener, len(openers))
	for i, o := range openers {
		out[i] = rootfs.LayerOpener(o)
	}
	return out, nil
}

// imageAPI is the image store as the API sees it.
type imageAPI struct {
	*imagebuild.Service
	disks  *rootfs.Store
	log    *slog.Logger
	events *huskevents.Bus
}

func (a imageAPI) List(ctx context.Context, opts apicompat.ImageListOptions) ([]image.Summary, error) {
	return a.Service.List(ctx, opts.All, opts.Filters)
}

// Remove also drops the base disk of every image the store deleted: the
// store knows nothing of disks, and a base nobody can use is only a leak.
func (a imageAPI) Remove(ctx context.Context, ref string, force, prune bool) ([]image.DeleteResponse, error) {
	id, labels, layers := a.imageLabels(ctx, ref)
	resp, err := a.Service.Remove(ctx, ref, force, prune)
	a.publishRemoval(id, labels, layers, resp)
	for _, r := range resp {
		if r.Deleted == "" {
			continue
		}
		if rmErr := a.disks.RemoveBase(r.Deleted); rmErr != nil {
			a.log.Warn("remove base disk of deleted image", "image", r.Deleted, "err", rmErr)
		}
	}
	return resp, err
}

// systemInfo answers /info and /version.
type systemInfo struct {
	// engineID names this daemon's root for good (Info's ID).
	engineID string
	cfg      Config
	mgr      *containers.Manager
	images   *imagebuild.Service
	kernel   kernel.Kernel
	vmm      string
	accel    string
	// vmmVersion is what the VMM binary says of itself.
	vmmVersion string
}

func (s *systemInfo) Info(ctx context.Context) (system.Info, error) {
	running, paused, stopped := s.mgr.Counts()
	imgs, err := s.images.List(ctx, false, nil)
	if err != nil {
		return system.Info{}, err
	}
	host, _ := os.Hostname()
	var mem unix.Sysinfo_t
	_ = unix.Sysinfo(&mem)
	runtimeName := containers.RuntimeName(s.vmm)
	return system.Info{
		ID:                s.engineID,
		Containers:        running + paused + stopped,
		ContainersRunning: running,
		ContainersPaused:  paused,
		ContainersStopped: stopped,
		Images:            len(imgs),
		Driver:            "husk-ext4",
		DriverStatus:      [][2]string{{"Base disks", "ext4, read-only, one per image"}, {"Accelerator", s.accel}, {"Guest kernel", s.kernel.Version}},
		LoggingDriver:     "json-file",
		// What husk has of each kind, as dockerd lists its own: clients
		// read them to decide what they may ask for.
		Plugins: system.PluginsInfo{
			Volume:  []string{"local"},
			Network: []string{"bridge", "null"},
			Log:     []string{"json-file", "local"},
		},
		CgroupDriver:      "none",
		KernelVersion:     hostKernel(),
		OperatingSystem:   osName(),
		OSType:            "linux",
		Architecture:      "x86_64",
		NCPU:              runtime.NumCPU(),
		MemTotal:          int64(mem.Totalram) * int64(mem.Unit),
		DockerRootDir:     s.cfg.Root,
		Name:              host,
		ServerVersion:     version,
		Runtimes:          map[string]system.RuntimeWithStatus{runtimeName: {}},
		DefaultRuntime:    runtimeName,
		ExperimentalBuild: true,
		// As dockerd: the daemon's debug mode, and with it the figures
		// docker info shows only then.
		Debug:              s.cfg.Debug,
		NFd:                openFiles(),
		NGoroutines:        runtime.NumGoroutine(),
		SystemTime:         time.Now().Format(time.RFC3339Nano),
		IndexServerAddress: "https://index.docker.io/v1/",
		InitBinary:         "husk-agent",
		SecurityOptions:    []string{"name=microvm"},
		Labels:             []string{},
		RegistryConfig:     registryConfig(s.cfg.InsecureRegistries),
	}, nil
}

// openFiles is how many descriptors the daemon has open; -1 when it
// cannot tell, as dockerd's fileutils.GetTotalUsedFds.
func openFiles() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries) - 1 // the directory's own, open while it is read
}

// registryConfig is docker info's RegistryConfig as dockerd builds it
// from --insecure-registry: CIDRs (loopback always) and, beside Docker
// Hub's index, one insecure index per registry named.
func registryConfig(insecure []string) *registry.ServiceConfig {
	cfg := &registry.ServiceConfig{
		InsecureRegistryCIDRs: []netip.Prefix{netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("127.0.0.0/8")},
		IndexConfigs: map[string]*registry.IndexInfo{
			"docker.io": {Name: "docker.io", Mirrors: []string{}, Secure: true, Official: true},
		},
		Mirrors: []string{},
	}
	for _, r := range insecure {
		if p, err := netip.ParsePrefix(r); err == nil {
			if !slices.Contains(cfg.InsecureRegistryCIDRs, p.Masked()) {
				cfg.InsecureRegistryCIDRs = append(cfg.InsecureRegistryCIDRs, p.Masked())
			}
			continue
		}
		cfg.IndexConfigs[r] = &registry.IndexInfo{Name: r, Mirrors: []string{}, Secure: false}
	}
	return cfg
}

func (s *systemInfo) Version(ctx context.Context) (system.VersionResponse, error) {
	kernel := hostKernel()
	return system.VersionResponse{
		Platform:      struct{ Name string }{Name: "husk"},
		Version:       version,
		APIVersion:    "1.50",
		MinAPIVersion: "1.24",
		GoVersion:     runtime.Version(),
		Os:            "linux",
		Arch:          "amd64",
		KernelVersion: kernel,
		Experimental:  true,
		Components: []system.ComponentVersion{
			{Name: "Engine", Version: version, Details: map[string]string{
				"ApiVersion": "1.50", "MinAPIVersion": "1.24", "GoVersion": runtime.Version(),
				"Os": "linux", "Arch": "amd64", "KernelVersion": kernel, "Experimental": "true",
			}},
			{Name: s.vmm, Version: s.vmmVersion, Details: map[string]string{"Accelerator": s.accel, "GuestKernel": s.kernel.Version}},
		},
	}, nil
}

// binaryVersion is the first line a VMM binary prints for --version.
func binaryVersion(ctx context.Context, binary string) string {
	out, err := exec.CommandContext(ctx, binary, "--version").Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

func hostKernel() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func osName() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "Linux"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "Linux"
}

// buildSandboxes lets the Dockerfile builder boot build VMs.
type buildSandboxes struct{ vms *containers.BuildVMs }

func (b buildSandboxes) NewSandbox(ctx context.Context, baseImageID string, net builder.SandboxNetwork) (builder.Sandbox, error) {
	vm, err := b.vms.Start(ctx, baseImageID, containers.BuildNetwork{Mode: net.Mode, ExtraHosts: net.ExtraHosts})
	if err != nil {
		return nil, err
	}
	return buildSandbox{vm}, nil
}

// buildSandbox is a build VM as the builder drives it.
type buildSandbox struct{ *containers.BuildVM }

func (s buildSandbox) Run(ctx context.Context, p builder.Process, stdout, stderr io.Writer) (int, error) {
	spec := proto.ProcessSpec{Args: p.Args, Env: p.Env, Cwd: p.Cwd, User: p.User}
	for _, m := range p.Tmpfs {
		spec.Tmpfs = append(spec.Tmpfs, proto.ProcessTmpfs{Target: m.Target, Mode: m.Mode, UID: m.UID, GID: m.GID, Size: m.Size})
	}
	for _, b := range p.Binds {
		spec.Binds = append(spec.Binds, proto.ProcessBind{Source: b.Source, Target: b.Target, Dir: b.Dir, ReadOnly: b.ReadOnly})
	}
	spec.Staged = p.Staged
	return s.BuildVM.Run(ctx, spec, stdout, stderr)
}

// WriteRootfs writes an image's merged filesystem as a tar, for the
// BuildKit endpoint's local and tar exporters.
func (a imageSource) WriteRootfs(ctx context.Context, imageID string, w io.Writer) error {
	layers, err := a.Layers(ctx, imageID)
	if err != nil {
		return fmt.Errorf("layers of %s: %w", imageID, err)
	}
	return rootfs.Flatten(ctx, w, layers)
}
