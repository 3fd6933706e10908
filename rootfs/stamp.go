package rootfs

import (
	"fmt"
	"os"
	"syscall"
)

// FileStamp tells whether a disk image file is still the one seen
// before: a write through any descriptor moves its modification and
// change times, and a replacement (a copy renamed over it) gives it
// another inode.
type FileStamp struct {
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime"`
	Ctime int64  `json:"ctime"`
}

// StampOf stamps the file at path.
func StampOf(path string) (FileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return FileStamp{}, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return FileStamp{}, fmt.Errorf("stat %s: no inode", path)
	}
	return FileStamp{Dev: uint64(sys.Dev), Ino: sys.Ino, Size: st.Size(), Mtime: st.ModTime().UnixNano(),
		Ctime: syscall.TimespecToNsec(sys.Ctim)}, nil
}
