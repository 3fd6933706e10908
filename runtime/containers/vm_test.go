package containers

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/husk-vm/husk/runtime/vmm"
)

// releasingMachine is a VM whose VMM can give back its boot images; the
// rest of vmm.Machine is never called here.
type releasingMachine struct {
	vmm.Machine
	asked chan struct{}
	err   error
}

func (r *releasingMachine) ReleaseBootImages(context.Context) error {
	r.asked <- struct{}{}
	return r.err
}

// TestReleaseBootImages: a booted VM whose VMM can give back its boot
// images is asked to, once, and its refusal is only logged.
func TestReleaseBootImages(t *testing.T) {
	for _, err := range []error{nil, errors.New("CommandNotFound")} {
		r := &releasingMachine{asked: make(chan struct{}, 2), err: err}
		releaseBootImages(slog.New(slog.DiscardHandler), "c1", r)
		select {
		case <-r.asked:
		case <-time.After(10 * time.Second):
			t.Fatal("the VMM was not asked for its boot images")
		}
		select {
		case <-r.asked:
			t.Fatal("the VMM was asked twice")
		case <-time.After(100 * time.Millisecond):
		}
	}
	// A VMM that cannot is left alone.
	releaseBootImages(slog.New(slog.DiscardHandler), "c2", struct{ vmm.Machine }{})
}
