package qemu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
)

// ownCommands remembers, per QEMU binary, which of husk's own monitor
// commands (ReleaseCommand, ReleaseBootImagesCommand) it lacks. Only the
// QEMU `make qemu` builds has them, and Debian's binary, the default,
// refused the boot images' release after every cold boot: a monitor
// connection, a refusal and a debug line each time, beside the
// container's setup. A binary is known by its fileID, so a rebuilt or
// upgraded one is asked afresh.
type ownCommands struct {
	mu      sync.Mutex
	missing map[fileID]map[string]bool
}

func (c *ownCommands) lacks(bin fileID, cmd string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.missing[bin][cmd]
}

func (c *ownCommands) note(bin fileID, cmd string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.missing == nil {
		c.missing = map[fileID]map[string]bool{}
	}
	if c.missing[bin] == nil {
		c.missing[bin] = map[string]bool{}
	}
	c.missing[bin][cmd] = true
}

// binaryID is the file the driver's QEMU binary resolves to now.
func (d *Driver) binaryID() (fileID, error) {
	path, err := exec.LookPath(d.binary)
	if err != nil {
		return fileID{}, err
	}
	return statFile(path)
}

// runningBinaryID is the file a running QEMU was started from; it fails
// once that file has been replaced or removed.
func runningBinaryID(pid int) (fileID, error) {
	path, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return fileID{}, err
	}
	return statFile(path)
}

// knowBinary lets m consult and add to what the driver knows of its
// binary's commands; without it m asks QEMU every time.
func (m *Machine) knowBinary(own *ownCommands, bin fileID, err error) {
	if err != nil {
		return
	}
	m.own, m.binary = own, bin
}

// lacking returns an error wrapping errors.ErrUnsupported when m's binary
// is known to lack cmd, and nil when it may have it.
func (m *Machine) lacking(cmd string) error {
	if m.own == nil || !m.own.lacks(m.binary, cmd) {
		return nil
	}
	return fmt.Errorf("qemu %d: %s: %w", m.pid, cmd, errors.ErrUnsupported)
}

// noteRefusal records that m's binary lacks cmd when err is QEMU's
// answer that it has no such command. Other refusals (a KVM VM's for the
// translation release) say nothing of the binary.
func (m *Machine) noteRefusal(cmd string, err error) {
	var qe *QMPError
	if m.own != nil && errors.As(err, &qe) && qe.Class == "CommandNotFound" {
		m.own.note(m.binary, cmd)
	}
}
