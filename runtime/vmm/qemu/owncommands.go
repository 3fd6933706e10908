package qemu

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// ownCommands remembers, per QEMU binary, which of husk's own monitor
// commands (ReleaseCommand, ReleaseBootImagesCommand) it lacks. Only the
// QEMU `make qemu` builds has them, and Debian's binary, the default,
// refused the boot images' release after every cold boot: a monitor
// connection, a refusal and a debug line each time, beside the
// container's setup. A binary is known by the fileID of the file its
// QEMU runs, so a rebuilt or upgraded one is asked afresh.
type ownCommands struct {
	mu      sync.Mutex
	missing map[binaryCommand]bool
}

type binaryCommand struct {
	bin fileID
	cmd string
}

func (c *ownCommands) lacks(k binaryCommand) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.missing[k]
}

func (c *ownCommands) note(k binaryCommand) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.missing == nil {
		c.missing = map[binaryCommand]bool{}
	}
	c.missing[k] = true
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

// lacking returns an error wrapping errors.ErrUnsupported when m's binary
// is known to lack cmd, and nil when it may have it.
func (m *Machine) lacking(cmd string) error {
	if m.own == nil {
		return nil
	}
	bin, err := runningBinaryID(m.pid)
	if err != nil {
		return nil
	}
	if !m.own.lacks(binaryCommand{bin, cmd}) {
		return nil
	}
	return fmt.Errorf("qemu %d: %s: %w", m.pid, cmd, errors.ErrUnsupported)
}

// noteRefusal records that m's binary lacks cmd when err is QEMU's
// answer that it has no such command. Other refusals (a KVM VM's for the
// translation release) say nothing of the binary.
func (m *Machine) noteRefusal(cmd string, err error) {
	var qe *QMPError
	if m.own == nil || !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		return
	}
	bin, err := runningBinaryID(m.pid)
	if err != nil {
		return
	}
	m.own.note(binaryCommand{bin, cmd})
}
