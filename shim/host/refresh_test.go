package host

import (
	"errors"
	"fmt"
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

// An op the guest's agent does not know is told apart from its failing:
// a restore of a container whose agent predates OpFreeze has nothing to
// thaw, where a thaw that failed leaves its processes stopped.
func TestUnknownOp(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"today's agent", &AgentError{Kind: proto.KindInvalid, Message: `unknown op "freeze"`}, true},
		{"an agent from before the op", &AgentError{Kind: proto.KindNoProcess, Message: "no such process: "}, true},
		{"wrapped", fmt.Errorf("thaw: %w", &AgentError{Kind: proto.KindInvalid, Message: `unknown op "freeze"`}), true},
		{"the op failing", &AgentError{Kind: proto.KindInvalid, Message: "freeze: this agent keeps no cgroups"}, false},
		{"another process missing", &AgentError{Kind: proto.KindNoProcess, Message: "no such process: main"}, false},
		{"internal error", &AgentError{Kind: proto.KindInternal, Message: "freeze: write cgroup.freeze: EBUSY"}, false},
		{"not the agent's", errors.New("session closed"), false},
		{"none", nil, false},
	} {
		if got := unknownOp(tc.err); got != tc.want {
			t.Errorf("%s: unknownOp(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
