package proto

// MountSocket makes Target a unix socket that leads to a host socket: the
// host bind-mounted one (docker run -v /run/docker.sock:/var/run/docker.sock),
// which virtio-fs can show but not connect to. The agent listens at Target
// and hands each connection a container process makes to the host over an
// OpSocketConnect stream for the mount's Tag.
const MountSocket = "socket"

// OpSocketConnect waits, with ID the Tag of a MountSocket mount, for a
// container process to connect to that socket. The agent answers once one
// has (or with an error: no such socket mount); after the Response the
// stream carries the connection's bytes both ways, and closing either side
// of one closes that side of the other. The host keeps one such stream
// waiting per socket mount and opens the next as soon as one is answered.
const OpSocketConnect Op = "socketConnect"
