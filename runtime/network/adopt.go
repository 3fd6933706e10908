package network

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
)

// Adopting TAPs: a VM restored ahead of time (runtime/pool, huskd
// --pool-size) already holds TAPs of its own, made by UnbridgedTaps on no
// bridge, because a restored QEMU must open its NICs' TAPs as it starts.
// When a container takes such a VM, Attach has already given the
// container's endpoints their TAPs; AdoptTaps swaps each for the VM's:
// the endpoint's TAP is deleted and the VM's renamed to its name, put on
// the network's bridge and brought up. The records need no change (they
// name the TAP, not the device), published ports and DNS are untouched,
// and everything that later finds the TAP by name (Detach, a checkpoint's
// restore, DisconnectRunning) finds the adopted one.

// tapAdopter is the links a real host has; fakes may lack it.
type tapAdopter interface {
	// adoptTap replaces the TAP name with spare (down, on no bridge):
	// renamed to name, enslaved to bridge, up. On error name is a TAP of
	// its own on bridge again, and spare is either untouched or gone.
	adoptTap(spare, name, bridge string) error
}

// AdoptTaps makes spares[i] the TAP of the attached container's endpoint
// whose TAP is taps[i], for every i. On error every endpoint still has a
// TAP on its bridge (its own, or an adopted one) and spares not adopted
// are as they were.
func (m *Manager) AdoptTaps(ctx context.Context, taps, spares []string) error {
	if len(taps) != len(spares) {
		return fmt.Errorf("adopt %d TAPs for %d endpoints: %w", len(spares), len(taps), errdefs.ErrInvalidArgument)
	}
	ad, ok := m.links.(tapAdopter)
	if !ok {
		return fmt.Errorf("adopt TAPs: %w", errdefs.ErrNotImplemented)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	bridges := make([]string, len(taps))
	for i, tap := range taps {
		br, ok := m.bridgeOfTapLocked(tap)
		if !ok {
			return fmt.Errorf("adopt a TAP as %s: no attached container has it: %w", tap, errdefs.ErrNotFound)
		}
		bridges[i] = br
	}
	for i, tap := range taps {
		if err := ad.adoptTap(spares[i], tap, bridges[i]); err != nil {
			return fmt.Errorf("adopt TAP %s as %s: %w", spares[i], tap, err)
		}
	}
	return nil
}

// bridgeOfTapLocked is the bridge of the network whose endpoint has tap.
func (m *Manager) bridgeOfTapLocked(tap string) (string, bool) {
	for _, sb := range m.sandboxes {
		for _, ep := range sb.rec.Endpoints {
			if ep.Tap != tap {
				continue
			}
			n, ok := m.nets[ep.NetworkID]
			if !ok || n.rec.Bridge == "" {
				return "", false
			}
			return n.rec.Bridge, true
		}
	}
	return "", false
}
