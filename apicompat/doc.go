// Package apicompat serves the Docker Engine API on top of the image store
// and the container runtime: routing, version negotiation, request
// validation, error mapping and the stream formats (stdcopy frames, raw
// TTY, hijacked upgrades, JSON progress). It knows nothing about VMMs.
//
// dockerd (moby's daemon/server) is the reference for every status code,
// header and error message; the comments name the dockerd behaviour a piece
// of code reproduces where that is not obvious.
//
// Two small pieces are hand-rolled rather than taken from a library:
//
//   - The router. dockerd routes with gorilla/mux patterns such as
//     "/images/{name:.*}/json", where a greedy wildcard (image names contain
//     slashes) is followed by a literal suffix. net/http.ServeMux only
//     allows "{name...}" as the last segment, and gorilla/mux is not a
//     dependency of this module, so routes are anchored regular expressions
//     tried in registration order, as gorilla/mux does.
//   - The stdcopy writer. github.com/moby/moby/api/pkg/stdcopy only ships
//     the demultiplexer (StdCopy); the writer side lives in moby's internal
//     packages. The frame is an 8-byte header (stream, 3 zero bytes,
//     big-endian length) followed by the payload.
package apicompat
