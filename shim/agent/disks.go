package agent

import (
	"bytes"
	"os"
	"path/filepath"
)

// diskBySerial names the block device under sysBlock (/sys/block) whose
// serial is serial, or "" when none has it yet. A virtio-blk disk shows
// its serial in serial; a SCSI disk (QEMU's scsi-hd on virtio-scsi) in
// its unit serial number VPD page, device/vpd_pg80: a 4-byte header (type,
// page code, length) and the serial, which QEMU does not pad.
func diskBySerial(sysBlock, serial string) string {
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		dir := filepath.Join(sysBlock, e.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "serial")); err == nil {
			if string(bytes.TrimSpace(b)) == serial {
				return e.Name()
			}
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, "device", "vpd_pg80")); err == nil && len(b) >= 4 && b[1] == 0x80 {
			n := min(int(b[2])<<8|int(b[3]), len(b)-4)
			if string(bytes.Trim(b[4:4+n], " \x00")) == serial {
				return e.Name()
			}
		}
	}
	return ""
}

// isRemovable tells whether the block device dev under sysBlock has
// removable media.
func isRemovable(sysBlock, dev string) bool {
	b, err := os.ReadFile(filepath.Join(sysBlock, dev, "removable"))
	return err == nil && string(bytes.TrimSpace(b)) == "1"
}
