package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Kind names the daemon under test.
type Kind string

const (
	// Huskd is husk's daemon, the system under test.
	Huskd Kind = "huskd"
	// Dockerd is Debian's dockerd 20.10 (package docker.io), the reference
	// whose behaviour the suite's expectations were checked against.
	Dockerd Kind = "dockerd"
)

// DaemonConfig describes a daemon to start.
type DaemonConfig struct {
	Kind Kind
	// Dir holds all of the daemon's state, its socket and its log. It must
	// be short: unix socket paths are limited to 108 bytes.
	Dir string
	// BinDir holds huskd and husk-agent (Huskd only).
	BinDir string
	// InsecureRegistries are allowed over plain HTTP.
	InsecureRegistries []string
	// DockerCLI is the docker client used to check readiness.
	DockerCLI string
	// CHBinary, when set, makes huskd run its VMs under this
	// cloud-hypervisor (--vmm cloud-hypervisor, on KVM) instead of QEMU
	// under TCG (Huskd only).
	CHBinary string
	// Kernel, when set, is the guest kernel huskd boots (--kernel), e.g.
	// the minimal one `make kernel` builds (Huskd only).
	Kernel string
	// Quiet starts huskd without --debug, as users run it: its guests'
	// agents then log at info level, and a debug line on the serial
	// console costs the guest several milliseconds under TCG. The
	// benchmark sets it; tests want the debug log to diagnose from.
	Quiet bool
	// DefaultBridge keeps dockerd's default bridge network (docker0 and
	// its iptables rules, all inside the daemon's namespace), so that its
	// containers get a network as huskd's do by default. Without it
	// dockerd runs with --bridge=none and its containers have none
	// (Dockerd only).
	DefaultBridge bool
	// ExtraArgs are appended to the daemon's command line (e.g.
	// "--pool-size", "1"); SetExtraArgs changes them for the next start.
	ExtraArgs []string
}

// Daemon is a running daemon under test, inside a namespace.
type Daemon struct {
	cfg  DaemonConfig
	ns   *Netns
	proc *process
}

// StartDaemon starts the daemon described by cfg inside ns and waits until
// `docker version` succeeds against it.
func StartDaemon(ctx context.Context, ns *Netns, cfg DaemonConfig) (*Daemon, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create daemon dir: %w", err)
	}
	d := &Daemon{cfg: cfg, ns: ns}
	if err := d.start(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// Host is the DOCKER_HOST value that reaches the daemon.
func (d *Daemon) Host() string { return "unix://" + d.socket() }

// LogPath is the file that collects the daemon's stdout and stderr, across
// restarts.
func (d *Daemon) LogPath() string { return filepath.Join(d.cfg.Dir, "daemon.log") }

// Dir is the daemon's state directory.
func (d *Daemon) Dir() string { return d.cfg.Dir }

func (d *Daemon) socket() string { return filepath.Join(d.cfg.Dir, "docker.sock") }

// command is the one place that knows each daemon's command line.
func (d *Daemon) command() (*exec.Cmd, error) {
	var insecure []string
	for _, r := range d.cfg.InsecureRegistries {
		insecure = append(insecure, "--insecure-registry", r)
	}
	switch d.cfg.Kind {
	case Huskd:
		vmm := []string{"--vmm", "qemu", "--accel", "tcg"}
		if d.cfg.CHBinary != "" {
			vmm = []string{"--vmm", "cloud-hypervisor", "--accel", "kvm"}
		}
		args := []string{"--root", filepath.Join(d.cfg.Dir, "root"), "--host", d.Host()}
		if !d.cfg.Quiet {
			// Debug logs (the daemon's and each guest agent's console) are
			// what a failing run is diagnosed from.
			args = append(args, "--debug")
		}
		args = append(args, vmm...)
		if d.cfg.Kernel != "" {
			args = append(args, "--kernel", d.cfg.Kernel)
		}
		args = append(append(args, insecure...), d.cfg.ExtraArgs...)
		cmd := d.ns.Command(filepath.Join(d.cfg.BinDir, "huskd"), args...)
		if d.cfg.CHBinary != "" {
			cmd.Env = append(os.Environ(), "HUSK_CH_BINARY="+d.cfg.CHBinary)
		}
		return cmd, nil
	case Dockerd:
		// An empty config file keeps the host's /etc/docker/daemon.json out;
		// containerd is started by dockerd itself, under the exec root.
		// Its bridge and iptables rules, when it keeps them, are its
		// namespace's own.
		configFile := filepath.Join(d.cfg.Dir, "daemon.json")
		if err := os.WriteFile(configFile, []byte("{}\n"), 0o644); err != nil {
			return nil, fmt.Errorf("write dockerd config: %w", err)
		}
		args := []string{
			"--config-file", configFile,
			"--data-root", filepath.Join(d.cfg.Dir, "data"),
			"--exec-root", filepath.Join(d.cfg.Dir, "exec"),
			"--pidfile", filepath.Join(d.cfg.Dir, "docker.pid"),
			"--host", d.Host(),
		}
		if !d.cfg.DefaultBridge {
			args = append(args, "--bridge=none", "--iptables=false", "--ip6tables=false")
		}
		return d.ns.Command("dockerd", append(append(args, insecure...), d.cfg.ExtraArgs...)...), nil
	default:
		return nil, fmt.Errorf("unknown daemon kind %q (want %q or %q)", d.cfg.Kind, Huskd, Dockerd)
	}
}

func (d *Daemon) start(ctx context.Context) error {
	cmd, err := d.command()
	if err != nil {
		return err
	}
	appendLine(d.LogPath(), "=== harness: starting "+strings.Join(cmd.Args, " "))
	d.proc, err = startProcess(cmd, d.LogPath())
	if err != nil {
		return err
	}
	err = waitFor(ctx, d.proc, string(d.cfg.Kind), func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, d.cfg.DockerCLI, "--host", d.Host(), "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("docker version: %w: %s", err, lastLine(string(out)))
		}
		return nil
	})
	if err != nil {
		if serr := d.proc.stop(context.Background()); serr != nil {
			err = fmt.Errorf("%w (and %v)", err, serr)
		}
		return fmt.Errorf("%w; see %s", err, d.LogPath())
	}
	return nil
}

// Stop sends SIGTERM and waits for the daemon to exit (SIGKILL if ctx ends
// first, reported as an error).
func (d *Daemon) Stop(ctx context.Context) error {
	return d.proc.stop(ctx)
}

// SetExtraArgs replaces the arguments appended to the daemon's command
// line from its next start (Restart, Crash) on.
func (d *Daemon) SetExtraArgs(args []string) { d.cfg.ExtraArgs = args }

// Restart stops the daemon and starts it again on the same state.
func (d *Daemon) Restart(ctx context.Context) error {
	if err := d.Stop(ctx); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if err := d.start(ctx); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	return nil
}

// Crash kills the daemon with SIGKILL, giving it no chance to clean up,
// and starts it again on the same state.
func (d *Daemon) Crash(ctx context.Context) error {
	if err := d.Kill(); err != nil {
		return fmt.Errorf("crash: %w", err)
	}
	if err := d.start(ctx); err != nil {
		return fmt.Errorf("crash: restart: %w", err)
	}
	return nil
}

// Kill kills the daemon with SIGKILL, giving it no chance to clean up, and
// leaves it down until Start: a test can then do what happens to the
// daemon's VMs while no daemon is there.
func (d *Daemon) Kill() error {
	appendLine(d.LogPath(), "=== harness: SIGKILL")
	if err := d.proc.kill(); err != nil {
		return fmt.Errorf("kill %s: %w", d.cfg.Kind, err)
	}
	return nil
}

// Start starts a killed daemon again on the same state.
func (d *Daemon) Start(ctx context.Context) error {
	if !d.proc.exited() {
		return fmt.Errorf("start %s: it is running", d.cfg.Kind)
	}
	return d.start(ctx)
}

// Leftovers lists processes that still mention the daemon's directory on
// their command line (VMMs, shims, containerd); after Stop there must be
// none.
func (d *Daemon) Leftovers() ([]Proc, error) {
	return ProcessesMentioning(d.cfg.Dir)
}

// appendLine appends a marker line to a log; failures are ignored because
// the marker only helps a human reading the log.
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// BuildHusk builds huskd and a static husk-agent from the module at
// repoRoot into outDir.
func BuildHusk(ctx context.Context, repoRoot, outDir string) error {
	for _, b := range []struct{ pkg, out string }{
		{"./cmd/huskd", "huskd"},
		{"./cmd/husk-agent", "husk-agent"},
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(outDir, b.out), b.pkg)
		cmd.Dir = repoRoot
		// The agent runs in a guest with nothing but itself: it must be
		// static; huskd is built the same way for simplicity.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
		}
	}
	return nil
}
