package rootfs

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/Microsoft/hcsshim/ext4/tar2ext4"
)

// On-disk layout constants of the images tar2ext4 writes (see its
// compactext4 package): 4 KiB blocks, 32-byte group descriptors starting at
// block 1, and no metadata checksums.
const (
	ext4BlockSize          = 4096
	ext4GroupDescSize      = 32
	ext4InodeBitmapOffset  = 4 // bg_inode_bitmap_lo within a group descriptor
	ext4RoCompatGdtCsum    = 0x10
	ext4RoCompatMetadataCs = 0x400
)

// padInodeBitmaps sets the bits past the last inode of every group's inode
// bitmap. tar2ext4 (hcsshim v0.15.0) leaves them clear, which e2fsck 1.47
// reports as "Padding at end of inode bitmap is not set" and exits 4; the
// kernel ignores them on a read-only mount, but a clean e2fsck is how we
// check images, and a future rw mount would need them. Upstream fix:
// microsoft/hcsshim#2811 (open at the time of writing); drop this when the
// dependency carries it.
func padInodeBitmaps(f io.ReadWriteSeeker) error {
	// The reader looks for the superblock relative to the current offset.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	sb, err := tar2ext4.ReadExt4SuperBlockReadSeeker(f)
	if err != nil {
		return fmt.Errorf("read superblock: %w", err)
	}
	if 1024<<sb.LogBlockSize != ext4BlockSize || sb.InodesPerGroup == 0 || sb.InodesPerGroup > 8*ext4BlockSize {
		return fmt.Errorf("unexpected ext4 geometry: block size %d, %d inodes per group", 1024<<sb.LogBlockSize, sb.InodesPerGroup)
	}
	if uint32(sb.FeatureRoCompat)&(ext4RoCompatGdtCsum|ext4RoCompatMetadataCs) != 0 {
		// Changing a bitmap would invalidate a checksum we do not compute.
		return fmt.Errorf("unexpected checksummed ext4 image (ro_compat %#x)", sb.FeatureRoCompat)
	}
	groups := sb.InodesCount / sb.InodesPerGroup
	gds := make([]byte, groups*ext4GroupDescSize)
	if _, err := f.Seek(ext4BlockSize, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.ReadFull(f, gds); err != nil {
		return fmt.Errorf("read group descriptors: %w", err)
	}
	bitmap := make([]byte, ext4BlockSize)
	for g := range groups {
		blk := binary.LittleEndian.Uint32(gds[g*ext4GroupDescSize+ext4InodeBitmapOffset:])
		off := int64(blk) * ext4BlockSize
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.ReadFull(f, bitmap); err != nil {
			return fmt.Errorf("read inode bitmap of group %d: %w", g, err)
		}
		for i := sb.InodesPerGroup; i < 8*ext4BlockSize; i++ {
			bitmap[i/8] |= 1 << (i % 8)
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return err
		}
		if _, err := f.Write(bitmap); err != nil {
			return fmt.Errorf("write inode bitmap of group %d: %w", g, err)
		}
	}
	return nil
}
