package templates

import (
	"context"
	"fmt"

	"github.com/husk-vm/husk/shim/host"
)

// Template names the template a VM of this shape restores from now. The
// name changes when the template is invalidated (another VMM build,
// kernel or initramfs), so a VM restored earlier (a pooled one) whose
// VM.Template differs is stale. The template need not be built yet.
func (m *Manager) Template(ctx context.Context, memoryMiB, cpus, nics int) (string, error) {
	k, err := m.keyFor(ctx, memoryMiB, cpus, nics)
	if err != nil {
		return "", err
	}
	return k.digest(), nil
}

// Refresh freshens a guest just restored or resumed after a while: its
// clock is set to the host's, and host entropy is mixed into its RNG, so
// that no two restores of one snapshot share their random numbers.
func Refresh(ctx context.Context, client *host.Client) error {
	if err := client.Freshen(ctx, nil); err != nil {
		return fmt.Errorf("refresh a guest restored from a template: %w", err)
	}
	return nil
}
