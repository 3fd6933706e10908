package agent_test

import (
	"strings"
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

// TestWarm: a warm-up runs its throwaway container and leaves the guest
// as it found it: not set up, so the container's setup and processes go
// through; once set up, a warm-up is refused, since the container's root
// must never be unmounted under it.
func TestWarm(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	spec := proto.WarmSpec{BaseSerial: "b", UpperSerial: "u"}
	if err := c.Warm(ctx(t), proto.WarmSpec{}); err == nil || !strings.Contains(err.Error(), "missing disk serials") {
		t.Errorf("warm-up without serials: %v", err)
	}
	for range 2 {
		if err := c.Warm(ctx(t), spec); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
	}
	setup(t, c)
	if r := run(t, c, "p1", proto.ProcessSpec{Args: []string{"echo", "after"}}); r.stdout != "after\n" || r.exit.Code != 0 {
		t.Errorf("process after the warm-up: %+v", r)
	}
	if err := c.Warm(ctx(t), spec); err == nil || !strings.Contains(err.Error(), "set up") {
		t.Errorf("warm-up of a set-up guest: %v, want a refusal", err)
	}
}
