package containers

import (
	"context"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/runtime/vmm"
)

type namedDriver struct{ vmm.Driver }

func (namedDriver) Name() string { return "qemu" }

// TestCreateRefuses: what dockerd refuses at create is refused before any
// image is looked up, in dockerd's words.
func TestCreateRefuses(t *testing.T) {
	m := &Manager{guest: Guest{Driver: namedDriver{}}}
	for _, tt := range []struct {
		name string
		cfg  container.Config
		hc   container.HostConfig
		want string
	}{
		{"relative working directory", container.Config{Image: "x", WorkingDir: "rel/dir"}, container.HostConfig{},
			"the working directory 'rel/dir' is invalid, it needs to be an absolute path"},
		{"unknown runtime", container.Config{Image: "x"}, container.HostConfig{Runtime: "runc"}, "Unknown runtime specified runc"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Create(context.Background(), CreateRequest{Config: &tt.cfg, HostConfig: &tt.hc})
			if err == nil || err.Error() != tt.want || !errdefs.IsInvalidArgument(err) {
				t.Errorf("create: %v, want invalid argument %q", err, tt.want)
			}
		})
	}
	if got := RuntimeName(namedDriver{}.Name()); got != "husk-qemu" {
		t.Errorf("runtime name %q", got)
	}
}
