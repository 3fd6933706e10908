//go:build linux

// Command husk-agent is /init of every husk VM's initramfs: it boots the
// guest and serves the host over the virtio-serial port named
// proto.PortName (QEMU) or vsock port proto.VsockPort (cloud-hypervisor).
// Build it static: CGO_ENABLED=0.
package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/agent/embeddeddns"
	"github.com/husk-vm/husk/shim/proto"
)

func main() {
	// In the agent's re-executed archive helper this does the helper's
	// work and never returns.
	agent.Reexec()

	console, err := os.OpenFile("/dev/console", os.O_WRONLY, 0)
	if err != nil {
		console = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(console, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Package agent keeps this goroutine on the main thread (see its
	// init); the agent's work runs on another, whose wake-ups need not wait
	// for that one thread.
	done := make(chan error, 1)
	go func() { done <- run(context.Background(), log) }()
	if err = <-done; err != nil {
		log.Error("husk-agent failed", "err", err)
	}
	if os.Getpid() != 1 {
		os.Exit(1)
	}
	// PID 1 must not exit (the kernel would panic over the log above);
	// end the machine instead.
	if err := agent.PowerOff(); err != nil {
		log.Error("power off", "err", err)
	}
	select {}
}

// logLevel is debug when the kernel command line has husk.debug (huskd
// --debug passes it), else info.
func logLevel() slog.Level {
	cmdline, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(cmdline)) {
		if f == "husk.debug" {
			return slog.LevelDebug
		}
	}
	return slog.LevelInfo
}

func run(ctx context.Context, log *slog.Logger) error {
	pid1 := os.Getpid() == 1
	if pid1 {
		if err := agent.Boot(ctx, log, "/husk/modules.order"); err != nil {
			return err
		}
		// /dev/console may only exist now that devtmpfs is mounted.
		if c, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
			log = slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{Level: logLevel()}))
		}
	}
	log.Info("husk-agent starting", "pid", os.Getpid())
	rootfs := &agent.GuestRootfs{}
	if pid1 {
		// The initramfs carries the init layer (kernel.BuildInitramfs).
		rootfs.InitLayer, rootfs.HideLostFound = proto.InitLayerDir, proto.HideLostFoundDir
	}
	// Main processes start through the C init, which huskd packs into
	// every initramfs beside the agent.
	a, err := agent.New(agent.Options{
		Logger:      log,
		InitExe:     proto.ContainerInitPath,
		Rootfs:      rootfs,
		Network:     agent.ConfigureNetwork,
		WarmNetwork: agent.WarmNetwork,
		PowerOff:    agent.PowerOff,
		ReapOrphans: pid1,
		Refresher:   agent.GuestRefresher{},
		Interfaces:  agent.GuestInterfaces{},
		Cgroups:     agent.GuestCgroups{},
		DNSRedirect: &embeddeddns.Redirect{Cgroup: agent.GuestCgroups{}.Root},
	})
	if err != nil {
		return err
	}
	defer a.Close()
	// Serve the host over whichever channel this VMM gives: QEMU's
	// virtio-serial port, or cloud-hypervisor's vsock. A port whose device
	// is absent simply never yields a session. The port is checked for a
	// host every 10 ms rather than 50: a VM restored from a template
	// waits in Accept for its first session, and the check is one poll(2)
	// that runs only while no host is connected.
	serial := &agent.SerialListener{Name: proto.PortName, Interval: 10 * time.Millisecond}
	defer serial.Close()
	listeners := []agent.Listener{serial}
	if vl, err := agent.ListenVsock(proto.VsockPort); err != nil {
		log.Info("no vsock channel", "err", err)
	} else {
		defer vl.Close()
		listeners = append(listeners, vl)
	}
	log.Info("serving host", "serial_port", proto.PortName, "vsock_port", proto.VsockPort, "channels", len(listeners))
	return a.Serve(ctx, agent.NewAnyListener(listeners...))
}
