package proto

// Ops that read a container root's changes without disturbing it (docker
// diff, commit and export). They work on a running container and on one
// booted only for them; they need OpSetup first.
//
//   - OpChanges: one Response with Changes set: what the writable layer
//     adds, changes and deletes relative to the image, by the rules of
//     dockerd's diff of two directory trees.
//   - OpDiffLayer: a Response, then the writable layer as an uncompressed
//     OCI layer tar (as OpCutLayer writes one, with the same paths left
//     out), then a second Response. Nothing is cut: the root stays as it
//     is. With Diff.Freeze the writable filesystem is frozen while it is
//     read, so that writers wait and the layer is one consistent state.
//     A stream that ends before the second Response carries an incomplete
//     layer.
//   - OpExport: a Response, then a tar of the whole root filesystem as the
//     container sees it without its volumes and the agent's own mounts,
//     then a second Response.
const (
	OpChanges   Op = "changes"
	OpDiffLayer Op = "diff-layer"
	OpExport    Op = "export"
)

// DiffSpec is the Request's Diff for OpDiffLayer.
type DiffSpec struct {
	Freeze bool `json:"freeze,omitempty"`
}

// ChangeKind is dockerd's archive.ChangeType: 0 modified, 1 added, 2
// deleted.
type ChangeKind uint8

const (
	ChangeModify ChangeKind = 0
	ChangeAdd    ChangeKind = 1
	ChangeDelete ChangeKind = 2
)

// Change is one entry of OpChanges' answer; Path is absolute in the root.
type Change struct {
	Path string     `json:"path"`
	Kind ChangeKind `json:"kind"`
}
