package agent

import "runtime"

// The agent joins containers' namespaces, chroots and changes credentials
// on goroutines locked to their thread, and throws the thread away by
// letting the goroutine exit locked (joinns_linux.go, SetHostname,
// resolveInRoot). The Go runtime ends such a thread, except the process's
// main thread, which it parks for good instead: had one of those
// goroutines run there, the agent's main thread would stay in a
// container's root and namespaces, keeping its mounts alive, and
// /proc/<agent>/ns, root and mounts would describe the container.
// Locking the main goroutine to the main thread from an init is the way
// Go offers to keep every other goroutine off it.
func init() { runtime.LockOSThread() }
