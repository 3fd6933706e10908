package host

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// goneGuest is a VM whose VMM has exited: its agent cannot be dialled.
type goneGuest struct{}

func (goneGuest) PID() int { return 42 }
func (goneGuest) DialAgent(context.Context) (net.Conn, error) {
	return nil, errors.New("dial agent: qemu 42 has exited")
}
func (goneGuest) Wait(context.Context) error { return nil }

// TestConnectStopsWhenTheVMMExits: a guest that dies while booting (a
// kernel panic, too little memory) fails the start at once, not at the
// end of the ready timeout.
func TestConnectStopsWhenTheVMMExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err := Connect(ctx, goneGuest{}, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "the VMM (pid 42) exited") {
		t.Fatalf("Connect to an exited VMM: %v, want an error saying it exited", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Connect waited for its deadline")
	}
}
