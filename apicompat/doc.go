// Package apicompat serves the Docker Engine API on top of the image store
// and the container runtime: routing, version negotiation, request
// validation, error mapping and the stream formats (stdcopy frames, raw
// TTY, hijacked upgrades, JSON progress). It knows nothing about VMMs.
package apicompat
