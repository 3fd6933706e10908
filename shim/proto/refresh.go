package proto

import "encoding/json"

// OpRefresh freshens a guest that has just been restored from a snapshot,
// whose clock stopped when the snapshot was taken and whose RNG state is
// shared with every other restore of that snapshot. The agent sets the
// clock, mixes the host's entropy into the RNG and reseeds it, then
// answers; nothing follows on the stream.
const OpRefresh Op = "refresh"

// RefreshSpec is OpRefresh's argument (Request.Refresh).
type RefreshSpec struct {
	// TimeUnixNano is the host's wall clock when the request was sent;
	// 0 leaves the guest clock alone.
	TimeUnixNano int64 `json:"timeUnixNano,omitempty"`
	// Entropy is fresh randomness from the host (at least 32 bytes to
	// count), credited to the guest's pool before the RNG is reseeded, so
	// that two restores of one snapshot do not draw the same numbers.
	Entropy []byte `json:"entropy,omitempty"`
	// Network is reserved for re-addressing the guest's interfaces after
	// a restore (a new MAC/IP per restored copy, and an announcement);
	// the agent ignores it until networking defines it.
	Network json.RawMessage `json:"network,omitempty"`
}
