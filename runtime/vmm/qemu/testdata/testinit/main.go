// Command testinit is a stand-in guest agent for the QEMU driver's
// integration test. As PID 1 it loads /husk/modules.order, mounts devtmpfs
// and sysfs, finds the husk.agent virtio-serial port and the disks'
// serials (virtio-blk, or SCSI's VPD page 0x80), then answers the host:
// any line but "ping" gets "ready sda=<serial>:ro sdb=<serial>:rw ...", "ping" gets "pong", and
// "incr" increments a counter in memory and answers "count <n>", and
// "media" opens each disk and answers "media sda=<serial>:<bytes>:<first
// 8 bytes> ..." (":none" for a removable disk without a medium).
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "testinit: %v\n", err)
	}
	// PID 1 must not exit; power off so a failure ends the VM quickly.
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

func run() error {
	for _, m := range []struct{ src, dst, fs string }{
		{"devtmpfs", "/dev", "devtmpfs"},
		{"sysfs", "/sys", "sysfs"},
		{"proc", "/proc", "proc"},
	} {
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	order, err := os.ReadFile("/husk/modules.order")
	if err != nil {
		return err
	}
	for _, p := range strings.Fields(string(order)) {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("load %s: %w", p, err)
		}
	}
	port, err := findPort("husk.agent")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(port, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "testinit: port %s open\n", port)
	// A read returns 0 (EOF) while no host is connected to the port, for
	// example between two DialAgent calls; the port itself stays usable,
	// so wait a little and read again.
	r := bufio.NewReader(f)
	counter := 0
	for {
		line, err := r.ReadString('\n')
		if err == io.EOF && line == "" {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read port: %w", err)
		}
		var reply string
		switch strings.TrimSpace(line) {
		case "ping":
			reply = "pong"
		case "media":
			reply = "media" + media()
		case "chatter":
			// Lines the host never asked for, as an agent forwarding a
			// container's output writes them, from now on.
			go func() {
				for i := 0; ; i++ {
					fmt.Fprintf(f, "tick %d\n", i)
					time.Sleep(20 * time.Millisecond)
				}
			}()
			reply = "chattering"
		case "incr":
			// Memory that must survive a snapshot and restore.
			counter++
			reply = fmt.Sprintf("count %d", counter)
		default:
			reply = "ready" + disks()
		}
		if _, err := fmt.Fprintln(f, reply); err != nil {
			return err
		}
	}
}

func findPort(name string) (string, error) {
	for range 500 {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, _ := os.ReadFile(n)
			if strings.TrimSpace(string(b)) == name {
				dev := "/dev/" + filepath.Base(filepath.Dir(n))
				if _, err := os.Stat(dev); err == nil {
					return dev, nil
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "", fmt.Errorf("no virtio port %s", name)
}

// serialOf is the serial of the disk whose /sys/block directory is d:
// virtio-blk's serial, or SCSI's VPD page 0x80.
func serialOf(d string) string {
	if v, err := os.ReadFile(filepath.Join(d, "serial")); err == nil {
		return strings.TrimSpace(string(v))
	}
	if v, err := os.ReadFile(filepath.Join(d, "device", "vpd_pg80")); err == nil && len(v) > 4 {
		return strings.Trim(string(v[4:]), " \x00")
	}
	return ""
}

func disks() string {
	devs, _ := filepath.Glob("/sys/block/[sv]d*")
	slices.Sort(devs)
	var b strings.Builder
	for _, d := range devs {
		serial := serialOf(d)
		mode := "rw"
		if ro, _ := os.ReadFile(filepath.Join(d, "ro")); strings.TrimSpace(string(ro)) == "1" {
			mode = "ro"
		}
		fmt.Fprintf(&b, " %s=%s:%s", filepath.Base(d), serial, mode)
	}
	return b.String()
}

// media opens each disk, which makes the kernel check a removable disk
// for a new medium (and re-read its capacity, dropping what it cached),
// and reports its size and first bytes.
func media() string {
	devs, _ := filepath.Glob("/sys/block/sd*")
	slices.Sort(devs)
	var b strings.Builder
	for _, d := range devs {
		serial := serialOf(d)
		f, err := os.Open("/dev/" + filepath.Base(d))
		if err != nil {
			fmt.Fprintf(&b, " %s=%s:none", filepath.Base(d), serial)
			continue
		}
		size, _ := f.Seek(0, io.SeekEnd)
		head := make([]byte, 8)
		n, _ := f.ReadAt(head, 0)
		f.Close()
		fmt.Fprintf(&b, " %s=%s:%d:%s", filepath.Base(d), serial, size, strings.TrimRight(string(head[:n]), "\x00"))
	}
	return b.String()
}
