package qemu

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/containerd/errdefs"
)

// Handing over a VM started ahead of time (runtime/pool): it was restored
// into a directory of the pool's and with NICs whose MACs nobody has yet;
// the container that takes it moves the directory into its own and gives
// the guest its MACs. These two methods let the Machine follow.

// Relocate tells the Machine that its directory was renamed to dir. The
// QEMU process follows by itself: its working directory, sockets and
// open files are the same inodes under the new name, and Reattach finds
// it there (the process's cwd names the new path). Call it while nothing
// else uses the Machine.
func (m *Machine) Relocate(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("relocate qemu %d: %w", m.pid, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirFD != nil {
		held, err := m.dirFD.Stat()
		if err != nil {
			return fmt.Errorf("relocate qemu %d: %w", m.pid, err)
		}
		named, err := os.Stat(abs)
		if err != nil {
			return fmt.Errorf("relocate qemu %d: %w", m.pid, err)
		}
		if !os.SameFile(held, named) {
			return fmt.Errorf("relocate qemu %d: %s is not its directory: %w", m.pid, abs, errdefs.ErrInvalidArgument)
		}
	}
	m.dir = abs
	return nil
}

// RecordNICMACs records that the VM's NICs, in slot order, are now known
// by macs: the guest gave its interfaces the container's addresses, so
// RemoveNIC and a later snapshot must know them by those. The device
// state is not touched (the guest's driver owns the address it uses).
func (m *Machine) RecordNICMACs(macs []string) error {
	m.hotplug.Lock()
	defer m.hotplug.Unlock()
	m.mu.Lock()
	l := m.layout
	m.mu.Unlock()
	if l == nil {
		return fmt.Errorf("record NIC addresses of qemu %d: its layout is unknown: %w", m.pid, errdefs.ErrNotImplemented)
	}
	nics := slices.Clone(nicsOf(l))
	if len(nics) != len(macs) {
		return fmt.Errorf("record NIC addresses of qemu %d: it has %d NICs, not %d: %w", m.pid, len(nics), len(macs), errdefs.ErrInvalidArgument)
	}
	for i, s := range macs {
		mac, err := net.ParseMAC(s)
		if err != nil {
			return fmt.Errorf("record NIC addresses of qemu %d: %w: %w", m.pid, err, errdefs.ErrInvalidArgument)
		}
		nics[i].MAC = mac.String()
	}
	next := *l
	next.NICs = nics
	return m.setLayout(&next)
}
