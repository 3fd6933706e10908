package containers

import (
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

func TestPsColumns(t *testing.T) {
	now := time.Date(2026, 3, 4, 15, 30, 0, 0, time.Local)
	tests := []struct{ got, want string }{
		{cpuTime(0), "00:00:00"},
		{cpuTime(3725 * time.Second), "01:02:05"},
		{cpuTime(26 * time.Hour), "1-02:00:00"},
		{startTime(now.Add(-time.Hour), now), "14:30"},
		{startTime(now.Add(-48*time.Hour), now), "Mar02"},
		{cpuPercent(time.Second, 4*time.Second), "25"},
		{cpuPercent(time.Second, 0), "0"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%d: got %q, want %q", i, tt.got, tt.want)
		}
	}
}

// A failed start is worded as dockerd words it, with its status: runc's
// words where the CLI picks its exit status from them, the agent's own for
// a bad user or setting, dockerd's for a working directory that is a file.
func TestStartError(t *testing.T) {
	for _, tt := range []struct {
		kind        proto.ErrorKind
		msg, want   string
		invalidArgs bool
	}{
		{proto.KindNotFound, `exec: "x": executable file not found in $PATH`,
			`failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "x": executable file not found in $PATH: unknown`, true},
		{proto.KindUser, "unable to find user nope: no matching entries in passwd file", "unable to find user nope: no matching entries in passwd file", true},
		{proto.KindConfig, "Cannot mkdir: /etc/passwd is not a directory", "Cannot mkdir: /etc/passwd is not a directory", false},
		{proto.KindInternal, "mount: boom", "start container process: mount: boom", false},
	} {
		err := startError(&host.AgentError{Kind: tt.kind, Message: tt.msg})
		if err.Error() != tt.want || errdefs.IsInvalidArgument(err) != tt.invalidArgs {
			t.Errorf("%s: %v (invalid argument %v), want %q (%v)", tt.kind, err, errdefs.IsInvalidArgument(err), tt.want, tt.invalidArgs)
		}
	}
}
