// Package agent is husk-agent, PID 1 of every husk VM: it boots the guest
// (Boot), finds the host channel (FindSerialPort, SerialListener,
// ListenVsock) and serves the protocol of package proto over one disposable
// yamux session after another (Agent.Serve), while the container's
// processes, their buffered output and exit statuses live on across
// sessions.
//
// Each container process is started through a re-execution of the agent
// binary (see Reexec) in new PID, mount and UTS namespaces, so the user's
// program is PID 1 of its namespace, as under Docker. That child mounts the
// container's /proc, /sys and /dev privately, chroots into the root prepared
// by Setup, resolves the user and execs the program; failures before the
// exec come back over a close-on-exec pipe.
//
// Hand-rolled parts: /etc/passwd and /etc/group resolution follows runc's
// rules (github.com/moby/sys/user) but is a few dozen lines here so the
// static agent needs no further module; the output buffering (output.go) is
// specific to the guarantee that nothing is lost between sessions.
package agent
