package proto

// OpLayerSize measures the container's writable layer the way dockerd
// sizes one (a container's SizeRw): the apparent sizes of the files in the
// overlay's upper directory, each inode once, directories not at all. One
// Response with LayerSize set; it needs OpSetup first.
//
// The host measures a stopped container's upper disk itself; this op is
// for a running VM, whose latest writes are in the guest's page cache and
// journal rather than on the disk the host could read.
const OpLayerSize Op = "layer-size"
