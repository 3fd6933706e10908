package containers

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/runtime/vmm"
)

// goneMachine is a VMM whose process has exited: its agent cannot be
// dialled. Only the methods connectAgent uses are implemented.
type goneMachine struct{ vmm.Machine }

func (goneMachine) PID() int { return 42 }
func (goneMachine) DialAgent(context.Context) (net.Conn, error) {
	return nil, errors.New("dial agent: qemu 42 has exited")
}
func (goneMachine) Wait(context.Context) error { return nil }

// TestConnectAgentStopsWhenTheVMMExits: a guest that dies while booting (a
// kernel panic, too little memory) fails the start at once, not at the
// end of the ready timeout.
func TestConnectAgentStopsWhenTheVMMExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err := connectAgent(ctx, goneMachine{})
	if err == nil || !strings.Contains(err.Error(), "the VMM (pid 42) exited") {
		t.Fatalf("connectAgent to an exited VMM: %v, want an error saying it exited", err)
	}
	if ctx.Err() != nil {
		t.Fatal("connectAgent waited for its deadline")
	}
}
