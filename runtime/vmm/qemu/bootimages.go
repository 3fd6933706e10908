package qemu

import (
	"context"
	"fmt"
)

// ReleaseBootImagesCommand, a QMP command, has QEMU give back the pages
// of the kernel and initramfs files a VM booted from. QEMU keeps both
// mapped for as long as it runs, so that a reset can load them again,
// and their pages stay resident from the boot's read: for a cold-booted
// VM, ~44 MiB of Debian's uncompressed kernel (booted through its PVH
// entry) and ~6 MiB of husk's initramfs, more than the rest of the
// sandbox's VMM together. husk's VMs never reset (-no-reboot turns a
// reset into an exit), and the command refuses a VM that might. It is
// husk's own (minimal/patches/boot-images-release.patch): only the QEMU
// `make qemu` builds has it. A VM restored from a snapshot has no boot
// images, and the command does nothing there.
const ReleaseBootImagesCommand = "x-husk-release-boot-images"

// ReleaseBootImages asks QEMU to give back the memory of the VM's boot
// images. Any QEMU but `make qemu`'s refuses it with a QMPError, and once
// a binary has, its VMs are not asked again: the error then wraps
// errors.ErrUnsupported.
func (m *Machine) ReleaseBootImages(ctx context.Context) error {
	if err := m.lacking(ReleaseBootImagesCommand); err != nil {
		return err
	}
	q, err := m.QMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	if err := q.Execute(ctx, ReleaseBootImagesCommand, nil, nil); err != nil {
		m.noteRefusal(ReleaseBootImagesCommand, err)
		return fmt.Errorf("qemu %d: %w", m.pid, err)
	}
	return nil
}
