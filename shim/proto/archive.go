package proto

import "time"

// Archive ops copy files into and out of the container root (docker cp).
// Paths are resolved inside the root as the container sees it: symlinks are
// followed as if the root were "/", and nothing outside it is reachable.
//
//   - OpArchiveStat: one Response with Stat set.
//   - OpArchiveGet: a Response with Stat set, then the tar stream of the
//     path (entries named from the path's last element), then the agent
//     closes the stream.
//   - OpArchivePut: a Response once the destination directory is known to
//     exist; the host then writes a tar stream and closes its side; the
//     agent extracts it and sends a second Response (Error set on
//     failure).
//
// A path that does not exist fails with KindNotFound; a destination that
// is not a directory, or an archive that tries to leave it, with
// KindInvalid.
const (
	OpArchiveStat Op = "archive-stat"
	OpArchiveGet  Op = "archive-get"
	OpArchivePut  Op = "archive-put"
)

// ArchiveSpec is the Request's Archive for the archive ops.
type ArchiveSpec struct {
	// Path is absolute in the container; a trailing "/" or "/." is kept
	// (it changes how the path is resolved and archived, as in Docker).
	Path string `json:"path"`
	// NoOverwriteDirNonDir refuses to replace a directory by a
	// non-directory or the reverse (put).
	NoOverwriteDirNonDir bool `json:"noOverwriteDirNonDir,omitempty"`
	// ChownTo, when set, is a --user value whose uid and gid own every
	// extracted file (Docker's copyUIDGID); otherwise the archive's owners
	// are kept.
	ChownTo string `json:"chownTo,omitempty"`
}

// PathStat describes a path in the container, as Docker's
// X-Docker-Container-Path-Stat header does. Mode is a Go fs.FileMode.
type PathStat struct {
	Name       string    `json:"name"`
	Size       int64     `json:"size"`
	Mode       uint32    `json:"mode"`
	Mtime      time.Time `json:"mtime"`
	LinkTarget string    `json:"linkTarget"`
}
