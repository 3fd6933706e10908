package vmmtest

import (
	"context"
	"errors"
	"testing"
)

func TestProcess(t *testing.T) {
	kills := 0
	p := NewProcess(func() { kills++ })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait on a live process = %v, want the context's error", err)
	}
	_ = p.Kill()
	_ = p.Kill()
	if err := p.Wait(context.Background()); err != nil {
		t.Errorf("Wait after Kill = %v", err)
	}
	if kills != 1 {
		t.Errorf("onKill ran %d times, want 1", kills)
	}
}
