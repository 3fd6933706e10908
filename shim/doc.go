// Package shim holds everything that crosses the host↔guest boundary: the
// wire protocol (proto), the in-guest agent (agent) and the host side that
// talks to it (host).
package shim
