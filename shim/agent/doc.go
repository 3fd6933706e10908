// Package agent is husk-agent, PID 1 of every husk VM: it boots the guest
// (Boot), finds the host channel (FindSerialPort, SerialListener,
// ListenVsock) and serves the protocol of package proto over one disposable
// yamux session after another (Agent.Serve), while the container's
// processes, their buffered output and exit statuses live on across
// sessions.
//
// A container's main process is started through an init in new PID, mount
// and UTS namespaces, so the user's program is PID 1 of its namespace, as
// under Docker. That child mounts the container's /proc, /sys and /dev
// privately, chroots into the root prepared by Setup, takes the user's
// credentials and execs the program; failures before the exec come back
// over a close-on-exec pipe. The init is a small C program that carries
// out steps the agent works out (cinit_linux.go, cinit/src/init.c): a Go
// init's runtime start cost every container started from a template tens
// of milliseconds. A docker exec joins every
// namespace of the main process instead (joinns_linux.go), so it sees the
// container's mounts; the IPC, network and cgroup namespaces are the
// guest's own, which the guest gives the container alone. Most execs skip
// the init: the agent starts the program itself from the thread that
// joined the namespaces (execdirect_linux.go); one with resource limits
// goes through the C init. Archive operations (docker cp)
// see the container root with its volumes but, as with dockerd, not its
// tmpfs mounts.
//
// Hand-rolled parts: /etc/passwd and /etc/group resolution follows runc's
// rules (github.com/moby/sys/user) but is a few dozen lines here so the
// static agent needs no further module; the output buffering (output.go) is
// specific to the guarantee that nothing is lost between sessions.
//
// --init's init is the C init's binary too (cinit/src/init.c), bound at
// /sbin/docker-init where dockerd puts tini: it does what tini does by
// default (run the command in its own process group, forward signals,
// reap orphans, exit as the command did) in some sixty lines, where
// shipping tini would add another program to build and to carry in every
// initramfs. Capabilities are bounded with prctl(PR_CAPBSET_DROP)
// from a name table in package proto rather than through a capability
// library: dropping the bounding set before execve is all runc's sets
// need, as limits_linux.go explains.
package agent
