package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/husk-vm/husk/runtime/containers"
	"github.com/husk-vm/husk/runtime/network"
)

// Config is the daemon's configuration: flags over /etc/husk/daemon.json
// over defaults. Each flag is also a key of the file, spelled the same.
type Config struct {
	Root               string   `json:"root"`
	Hosts              []string `json:"hosts"`
	InsecureRegistries []string `json:"insecure-registries"`
	VMM                string   `json:"vmm"`
	Accel              string   `json:"accel"`
	Kernel             string   `json:"kernel"`
	// QEMU is the qemu-system-x86_64 to run; "" is the one in PATH.
	QEMU      string `json:"qemu"`
	Agent     string `json:"agent"`
	MemoryMiB int    `json:"memory"`
	CPUs      int    `json:"cpus"`
	UpperSize int64  `json:"upper-size"`
	Debug     bool   `json:"debug"`
	// BridgeIP is the default bridge's gateway address and prefix length,
	// dockerd's --bip.
	BridgeIP string `json:"bip"`
	// Templates starts containers from snapshots of booted guests.
	Templates bool `json:"templates"`
	// PoolSize is the number of VMs per shape restored from templates
	// ahead of time, paused (0: none).
	PoolSize int `json:"pool-size"`
	// TCGReleaseIdle is how long a TCG VM idles before its QEMU gives
	// back its translated code (0: never); only `make qemu`'s QEMU can.
	TCGReleaseIdle Duration `json:"tcg-release-idle"`
}

// Duration is a time.Duration spelled in daemon.json as Go writes one,
// "30s", like the flag.
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

func defaults() Config {
	return Config{
		Root:      "/var/lib/husk",
		Hosts:     []string{"unix:///run/husk/docker.sock"},
		VMM:       "auto",
		Accel:     "auto",
		MemoryMiB: 256,
		CPUs:      containers.DefaultCPUs(),
		UpperSize: 16 << 30,
		BridgeIP:  network.DefaultBridgeIP.String(),
		Templates: true,
		// A restored VM's first exec translates what it runs afresh
		// (~0.2 s under TCG); an idle minute makes that a small price
		// for the ~20 MiB a start leaves translated.
		TCGReleaseIdle: Duration(time.Minute),
	}
}

func flags() []cli.Flag {
	d := defaults()
	return []cli.Flag{
		&cli.StringFlag{Name: "config-file", Value: "/etc/husk/daemon.json", Usage: "daemon configuration file"},
		&cli.StringFlag{Name: "root", Value: d.Root, Usage: "where husk keeps images, disks and containers"},
		&cli.StringSliceFlag{Name: "host", Aliases: []string{"H"}, Value: cli.NewStringSlice(d.Hosts...), Usage: "unix://PATH socket to serve the API on (repeatable)"},
		&cli.StringSliceFlag{Name: "insecure-registry", Usage: "registry HOST[:PORT] reached over plain HTTP (repeatable)"},
		&cli.StringFlag{Name: "vmm", Value: d.VMM, Usage: "auto, qemu or cloud-hypervisor"},
		&cli.StringFlag{Name: "accel", Value: d.Accel, Usage: "auto, kvm or tcg; auto uses KVM only where it boots faster than TCG"},
		&cli.StringFlag{Name: "kernel", Usage: "guest kernel (default: the newest /boot/vmlinuz-*)"},
		&cli.StringFlag{Name: "qemu", Usage: "qemu-system-x86_64 binary, e.g. the one `make qemu` builds (default: the one in PATH)"},
		&cli.StringFlag{Name: "agent", Usage: "static husk-agent binary (default: beside huskd)"},
		&cli.IntFlag{Name: "memory", Value: d.MemoryMiB, Usage: "default guest memory in MiB"},
		&cli.IntFlag{Name: "cpus", Value: d.CPUs, Usage: "default guest vCPUs; unset, the host's CPU count up to 2"},
		&cli.Int64Flag{Name: "upper-size", Value: d.UpperSize, Usage: "apparent size in bytes of each container's writable disk"},
		&cli.BoolFlag{Name: "debug", Aliases: []string{"D"}, Usage: "debug logging"},
		&cli.StringFlag{Name: "bip", Value: d.BridgeIP, Usage: "default bridge's gateway address and subnet, ADDR/LEN"},
		&cli.BoolFlag{Name: "templates", Value: d.Templates, Usage: "start containers from snapshots of booted guests (--templates=false boots each one)"},
		&cli.IntFlag{Name: "pool-size", Value: d.PoolSize, Usage: "VMs per shape in use kept restored from templates ahead of time, paused (0: none)"},
		&cli.DurationFlag{Name: "tcg-release-idle", Value: time.Duration(d.TCGReleaseIdle), Usage: "idle time after which a TCG VM's QEMU gives back its translated code (0: never; only the QEMU `make qemu` builds can)"},
	}
}

// loadConfig layers the file, then flags the user set, over defaults.
func loadConfig(c *cli.Context) (Config, error) {
	cfg := defaults()
	path := c.String("config-file")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return cfg, fmt.Errorf("read %s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist) && !c.IsSet("config-file"):
	default:
		return cfg, fmt.Errorf("read %s: %w", path, err)
	}
	set := func(name string, apply func()) {
		if c.IsSet(name) {
			apply()
		}
	}
	set("root", func() { cfg.Root = c.String("root") })
	set("host", func() { cfg.Hosts = c.StringSlice("host") })
	set("insecure-registry", func() { cfg.InsecureRegistries = c.StringSlice("insecure-registry") })
	set("vmm", func() { cfg.VMM = c.String("vmm") })
	set("accel", func() { cfg.Accel = c.String("accel") })
	set("kernel", func() { cfg.Kernel = c.String("kernel") })
	set("qemu", func() { cfg.QEMU = c.String("qemu") })
	set("agent", func() { cfg.Agent = c.String("agent") })
	set("memory", func() { cfg.MemoryMiB = c.Int("memory") })
	set("cpus", func() { cfg.CPUs = c.Int("cpus") })
	set("upper-size", func() { cfg.UpperSize = c.Int64("upper-size") })
	set("debug", func() { cfg.Debug = c.Bool("debug") })
	set("bip", func() { cfg.BridgeIP = c.String("bip") })
	set("templates", func() { cfg.Templates = c.Bool("templates") })
	set("pool-size", func() { cfg.PoolSize = c.Int("pool-size") })
	set("tcg-release-idle", func() { cfg.TCGReleaseIdle = Duration(c.Duration("tcg-release-idle")) })
	if len(cfg.Hosts) == 0 {
		return cfg, errors.New("no --host to listen on")
	}
	if _, err := netip.ParsePrefix(cfg.BridgeIP); err != nil {
		return cfg, fmt.Errorf("--bip %q: want an address and prefix length like %s", cfg.BridgeIP, network.DefaultBridgeIP)
	}
	if cfg.TCGReleaseIdle < 0 {
		return cfg, fmt.Errorf("--tcg-release-idle must not be negative (got %s)", time.Duration(cfg.TCGReleaseIdle))
	}
	if cfg.PoolSize < 0 {
		return cfg, fmt.Errorf("--pool-size must not be negative (got %d)", cfg.PoolSize)
	}
	if cfg.MemoryMiB < 64 || cfg.CPUs < 1 {
		return cfg, fmt.Errorf("--memory must be at least 64 and --cpus at least 1 (got %d, %d)", cfg.MemoryMiB, cfg.CPUs)
	}
	return cfg, nil
}

// chownDockerGroup gives the socket to the "docker" group when one exists,
// as dockerd does, so members can use it without root.
func chownDockerGroup(path string) {
	g, err := user.LookupGroup("docker")
	if err != nil {
		return
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return
	}
	_ = syscall.Chown(path, 0, gid)
}
