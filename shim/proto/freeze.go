package proto

// OpFreeze freezes the container's processes with the guest's cgroup v2
// freezer, or thaws them (Request.Freeze). A frozen process does not run
// and cannot tell it was stopped: no signal, no change of state it can
// read.
//
// The host freezes a container before it snapshots its VM. A restored
// copy's processes are then still frozen when its vCPUs start, and the
// host thaws them only after the refresh (OpRefresh): otherwise they run,
// for the 100 ms or more that the refresh takes to arrive under TCG, on
// the snapshot's clock and the snapshot's RNG state, which every restored
// copy shares, and two forks draw the same "random" numbers. A thaw waits
// for the refresh's reseed. Freezing a guest without a container, or
// thawing one that is not frozen, does nothing.
const OpFreeze Op = "freeze"

// FreezeSpec is OpFreeze's argument.
type FreezeSpec struct {
	Frozen bool `json:"frozen"`
}
