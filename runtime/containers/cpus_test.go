package containers

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/containerd/errdefs"
)

func TestValidateNanoCPUs(t *testing.T) {
	nc := int64(runtime.NumCPU())
	msg := fmt.Sprintf("range of CPUs is from 0.01 to %[1]d.00, as there are only %[1]d CPUs available", nc)
	for _, tt := range []struct {
		n       int64
		wantErr bool
	}{{0, false}, {1e7, false}, {nc * 1e9, false}, {nc*1e9 + 1, true}, {-1, true}, {1<<63 - 1, true}} {
		err := validateNanoCPUs(tt.n)
		if tt.wantErr != (err != nil) || err != nil && (!errdefs.IsInvalidArgument(err) || err.Error() != msg) {
			t.Errorf("validateNanoCPUs(%d) = %v, want error %v (%q)", tt.n, err, tt.wantErr, msg)
		}
	}
	if n := cpus(nil, 2); n != 2 {
		t.Errorf("cpus(nil) = %d", n)
	}
}
