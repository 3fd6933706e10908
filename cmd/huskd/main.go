// Command huskd is the husk daemon: the Docker Engine API on a unix socket,
// every container a microVM. This main only reads configuration and wires
// the packages together.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/apicompat"
	"github.com/husk-vm/husk/apicompat/buildkitapi"
	"github.com/husk-vm/husk/imagebuild"
	"github.com/husk-vm/husk/imagebuild/builder"
	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/rootfs"
	"github.com/husk-vm/husk/runtime/accel"
	"github.com/husk-vm/husk/runtime/containers"
	huskevents "github.com/husk-vm/husk/runtime/events"
	"github.com/husk-vm/husk/runtime/network"
	"github.com/husk-vm/husk/runtime/virtiofs"
	"github.com/husk-vm/husk/runtime/vmm/qemu"
	"github.com/husk-vm/husk/runtime/volumes"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	// huskd re-executes itself to start each virtiofsd in a mount
	// namespace of its own.
	virtiofs.Reexec()
	app := &cli.App{
		Name:    "huskd",
		Usage:   "Docker-compatible daemon that runs every container as a microVM",
		Version: version,
		Flags:   flags(),
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			return run(c.Context, cfg)
		},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "huskd:", err)
		os.Exit(1)
	}
}

func run(parent context.Context, cfg Config) error {
	logger := newLogger(cfg.Debug)
	slog.SetDefault(logger)
	routeLogrus(logger)
	ctx, stop := signal.NotifyContext(parent, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if err := os.MkdirAll(cfg.Root, 0o711); err != nil {
		return fmt.Errorf("create root %s: %w", cfg.Root, err)
	}
	lock, err := lockRoot(cfg.Root)
	if err != nil {
		return err
	}
	defer lock.Close()
	host := vmmHost(cfg.QEMU)
	if err := checkVMM(cfg.VMM, host); err != nil {
		return err
	}
	qemuDriver := newQEMU(logger, host.QEMU.Path, filepath.Join(cfg.Root, "kernel"), time.Duration(cfg.TCGReleaseIdle))
	k, err := kernel.Find(cfg.Kernel)
	if err != nil {
		return fmt.Errorf("guest kernel: %w", err)
	}
	// The QEMU driver extracts this kernel's ELF there when it first boots
	// it; those of earlier kernels go.
	if err := kernel.PrunePVH(filepath.Join(cfg.Root, "kernel"), k.Path); err != nil {
		logger.Warn("prune uncompressed kernels", "err", err)
	}
	agent, err := findAgent(cfg.Agent)
	if err != nil {
		return err
	}
	// The C init is built beside the agent (make build).
	cinit := filepath.Join(filepath.Dir(agent), "husk-init")
	if _, err := os.Stat(cinit); err != nil {
		return fmt.Errorf("container init: husk-init not found beside %s; build it (make build): %w", agent, err)
	}
	initramfs, err := kernel.BuildInitramfs(ctx, k, agent, cinit, filepath.Join(cfg.Root, "kernel"))
	if err != nil {
		return fmt.Errorf("build initramfs: %w", err)
	}
	if err := kernel.PruneInitramfs(filepath.Join(cfg.Root, "kernel"), initramfs); err != nil {
		logger.Warn("prune initramfs archives", "err", err)
	}
	guest := containers.Guest{
		Driver: qemuDriver, Kernel: k.Path, Initramfs: initramfs,
		MemoryMiB: cfg.MemoryMiB, CPUs: cfg.CPUs, UpperSize: cfg.UpperSize,
		ReadyTimeout: 2 * time.Minute, KernelSymbol: kernel.Symbolizer(k),
	}
	if cfg.Debug {
		guest.Cmdline = "husk.debug"
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		logger.Warn("host memory unknown: VMs are sized by --memory alone", "err", err)
	} else {
		guest.HostMemoryMiB = int(uint64(si.Totalram) * uint64(si.Unit) >> 20)
	}
	choice, err := accel.Choose(ctx, accel.Options{
		Requested: accelRequest(cfg), Kernel: k.Path, Initramfs: initramfs,
		CacheFile: filepath.Join(cfg.Root, "accel.json"), Boot: guest.BootToReady,
	})
	if err != nil {
		return err
	}
	guest.Accel = choice.Accel
	if err := qemu.NoHugePagesUnderTCG(choice.Accel); err != nil {
		logger.Warn("VMMs keep huge pages", "err", err)
	}
	driver, decision, err := pickVMM(cfg.VMM, host, choice, qemuDriver, logger)
	if err != nil {
		return err
	}
	guest.Driver = driver
	logger.Info("guest", "vmm", driver.Name(), "kernel", k.Path, "kernel_version", k.Version,
		"initramfs", initramfs, "accel", choice.Accel, "accel_reason", choice.Reason)

	disks, err := rootfs.New(filepath.Join(cfg.Root, "rootfs"))
	if err != nil {
		return err
	}
	var mgr *containers.Manager
	bus := huskevents.New(huskevents.DefaultHistory)
	images, err := imagebuild.New(imagebuild.Options{
		Root: filepath.Join(cfg.Root, "images"), InsecureRegistries: cfg.InsecureRegistries,
		InUse:   func(id string) []string { return mgr.InUse(id) },
		Running: func(id string) []string { return mgr.Running(id) },
		Logger:  logger,
	})
	if err != nil {
		return fmt.Errorf("open image store: %w", err)
	}
	nets, err := network.New(network.Options{
		Root: filepath.Join(cfg.Root, "network"), BridgeIP: netip.MustParsePrefix(cfg.BridgeIP), Logger: logger, Events: bus,
	})
	if err != nil {
		return fmt.Errorf("open networks: %w", err)
	}
	engineID, err := loadOrCreateEngineID(cfg.Root)
	if err != nil {
		return err
	}
	vols, err := volumes.New(filepath.Join(cfg.Root, "volumes"), logger, bus)
	if err != nil {
		return fmt.Errorf("open volumes: %w", err)
	}
	tpl := openTemplates(ctx, cfg, guest, disks, logger)
	if tpl != nil {
		defer tpl.Close()
	}
	mgr, err = containers.New(ctx, containers.Options{
		Root: filepath.Join(cfg.Root, "containers"), Images: imageSource{images},
		Disks: disks, Guest: guest, Network: nets, Volumes: vols, Logger: logger, Events: bus,
		Templates: tpl.starter(),
	})
	if err != nil {
		return fmt.Errorf("open containers: %w", err)
	}
	mgr.Restore(ctx)
	// After Restore: the containers whose VMs survived keep their TAPs,
	// addresses and published ports; everything else is swept.
	if err := nets.Start(ctx, mgr.IsRunning); err != nil {
		return fmt.Errorf("start networks: %w", err)
	}

	tpl.openPool(ctx, cfg, guest, nets, disks)
	// The common shape: the default size on one network.
	tpl.prepare(ctx, cfg.MemoryMiB, cfg.CPUs, 1)
	// Only now, with bridges up and survivors' TAPs kept: a restart
	// racing the networks' Start found no bridge to attach to.
	mgr.RestartOnBoot(ctx)

	buildVMs, err := containers.NewBuildVMs(ctx, containers.BuildVMOptions{
		Root: filepath.Join(cfg.Root, "builds", "vms"), Images: imageSource{images},
		Disks: disks, Guest: guest, Network: nets, Events: bus, Logger: logger,
	})
	if err != nil {
		return err
	}
	imageBuilder, err := builder.New(builder.Options{
		Images: images, Sandboxes: buildSandboxes{buildVMs}, Events: buildVMs,
		StateDir: filepath.Join(cfg.Root, "builds"), Logger: logger,
	})
	if err != nil {
		return fmt.Errorf("open builder: %w", err)
	}
	buildKit, err := buildkitapi.New(imageBuilder, buildkitapi.Options{
		TempDir: filepath.Join(cfg.Root, "builds", "contexts"), Version: version, Logger: logger,
		Files: imageSource{images},
	})
	if err != nil {
		return fmt.Errorf("open BuildKit endpoints: %w", err)
	}
	defer buildKit.Close()

	imgAPI := imageAPI{Service: images, disks: disks, log: logger, events: bus}
	handler := apicompat.New(apicompat.Config{
		Images:      imgAPI,
		Files:       containerFiles{mgr: mgr, images: imgAPI},
		Updater:     mgr,
		Events:      bus,
		Stats:       mgr,
		Containers:  mgr,
		Networks:    networkAPI{Manager: nets, containers: mgr},
		Checkpoints: mgr,
		Forker:      mgr,
		Builder:     imageBuilder,
		BuildKit:    buildKit,
		Execs:       mgr,
		Archives:    mgr,
		Admin:       mgr,
		Volumes:     vols,
		System: &systemInfo{engineID: engineID, cfg: cfg, mgr: mgr, images: images, kernel: k, vmm: driver.Name(), accel: choice.Accel,
			vmmVersion: binaryVersion(ctx, decision.Binary)},
		Logger:  logger,
		Version: version,
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	listeners, err := listen(cfg.Hosts)
	if err != nil {
		return err
	}
	errc := make(chan error, len(listeners))
	for _, l := range listeners {
		logger.Info("API listening", "addr", "unix://"+l.Addr().String())
		go func() { errc <- srv.Serve(l) }()
	}

	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err := <-errc:
		logger.Error("API server failed", "err", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Stop taking requests, then stop the containers, as dockerd does
	// without live-restore.
	_ = srv.Shutdown(shutdownCtx)
	mgr.Shutdown(shutdownCtx)
	if err := nets.Close(shutdownCtx); err != nil {
		logger.Warn("take networks down", "err", err)
	}
	for _, h := range cfg.Hosts {
		_ = os.Remove(strings.TrimPrefix(h, "unix://"))
	}
	logger.Info("stopped")
	return nil
}

func newLogger(debug bool) *slog.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// findAgent locates the static husk-agent binary: the flag, else beside
// huskd, else in PATH.
func findAgent(flag string) (string, error) {
	if flag != "" {
		if _, err := os.Stat(flag); err != nil {
			return "", fmt.Errorf("--agent: %w", err)
		}
		return flag, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "husk-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("husk-agent not found beside huskd; build it (make build) or pass --agent")
}

// listen opens each unix:// host, replacing a stale socket, mode 0660.
func listen(hosts []string) ([]net.Listener, error) {
	var out []net.Listener
	for _, h := range hosts {
		path, ok := strings.CutPrefix(h, "unix://")
		if !ok {
			closeAll(out)
			return nil, fmt.Errorf("--host %s: only unix:// sockets are supported", h)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			closeAll(out)
			return nil, fmt.Errorf("listen %s: %w", h, err)
		}
		if conn, err := net.Dial("unix", path); err == nil {
			conn.Close()
			closeAll(out)
			return nil, fmt.Errorf("listen %s: another daemon is serving it", h)
		}
		_ = os.Remove(path)
		l, err := net.Listen("unix", path)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("listen %s: %w", h, err)
		}
		if err := os.Chmod(path, 0o660); err != nil {
			l.Close()
			closeAll(out)
			return nil, fmt.Errorf("chmod %s: %w", path, err)
		}
		chownDockerGroup(path)
		out = append(out, l)
	}
	return out, nil
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}
