package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/husk-vm/husk/runtime/containers"
)

// load runs huskd's flag parsing over args and returns the configuration.
func load(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	var cfg Config
	var loadErr error
	app := &cli.App{Name: "huskd", Flags: flags(), Action: func(c *cli.Context) error {
		cfg, loadErr = loadConfig(c)
		return nil
	}}
	if err := app.Run(append([]string{"huskd"}, args...)); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return cfg, loadErr
}

func TestConfigDefaults(t *testing.T) {
	if _, err := os.Stat("/etc/husk/daemon.json"); err == nil {
		t.Skip("this machine has an /etc/husk/daemon.json: the defaults are not in force")
	}
	cfg, err := load(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Root != "/var/lib/husk" || !slices.Equal(cfg.Hosts, []string{"unix:///run/husk/docker.sock"}) ||
		cfg.VMM != "auto" || cfg.Accel != "auto" || cfg.Kernel != "" || cfg.MemoryMiB != 256 || cfg.CPUs != containers.DefaultCPUs() {
		t.Errorf("defaults = %+v", cfg)
	}
	// The default file may be absent; one named explicitly may not.
	if _, err := load(t, "--config-file", filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Error("a missing --config-file was accepted")
	}
}

func TestConfigFileAndFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "daemon.json")
	err := os.WriteFile(file, []byte(`{
		"root": "/srv/husk", "hosts": ["unix:///a.sock", "unix:///b.sock"],
		"insecure-registries": ["reg:5000"], "vmm": "qemu", "accel": "tcg",
		"kernel": "/boot/k", "qemu": "/opt/q/bin/qemu-system-x86_64", "memory": 512, "debug": true,
		"tcg-release-idle": "90s"
	}`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := load(t, "--config-file", file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Root != "/srv/husk" || !slices.Equal(cfg.Hosts, []string{"unix:///a.sock", "unix:///b.sock"}) ||
		!slices.Equal(cfg.InsecureRegistries, []string{"reg:5000"}) || cfg.VMM != "qemu" || cfg.Accel != "tcg" ||
		cfg.Kernel != "/boot/k" || cfg.QEMU != "/opt/q/bin/qemu-system-x86_64" || cfg.MemoryMiB != 512 || !cfg.Debug ||
		cfg.TCGReleaseIdle != Duration(90*time.Second) {
		t.Errorf("from file: %+v", cfg)
	}
	// Flags the user sets win over the file; the others keep its values.
	cfg, err = load(t, "--config-file", file, "--root", "/tmp/r", "--host", "unix:///c.sock", "--insecure-registry", "x:1", "--insecure-registry", "y:2", "--accel", "auto", "--qemu", "/usr/bin/qemu-system-x86_64", "--tcg-release-idle", "0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Root != "/tmp/r" || !slices.Equal(cfg.Hosts, []string{"unix:///c.sock"}) ||
		!slices.Equal(cfg.InsecureRegistries, []string{"x:1", "y:2"}) || cfg.Accel != "auto" || cfg.VMM != "qemu" || cfg.MemoryMiB != 512 ||
		cfg.QEMU != "/usr/bin/qemu-system-x86_64" || cfg.TCGReleaseIdle != 0 {
		t.Errorf("flags over file: %+v", cfg)
	}
}

func TestConfigRejects(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]string{
		"unknown key":      `{"rooot": "/x"}`,
		"bad json":         `{"root": `,
		"tiny memory":      `{"memory": 16}`,
		"no sockets":       `{"hosts": []}`,
		"idle as a number": `{"tcg-release-idle": 30}`,
		"negative idle":    `{"tcg-release-idle": "-1s"}`,
	}
	for name, body := range tests {
		file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := load(t, "--config-file", file); err == nil {
			t.Errorf("%s: %s accepted", name, body)
		}
	}
}
