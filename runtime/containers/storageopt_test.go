package containers

import (
	"testing"

	"github.com/containerd/errdefs"
)

func TestUpperSizeOf(t *testing.T) {
	const def = 16 << 30
	for _, tt := range []struct {
		opts map[string]string
		want int64
		err  string
	}{
		{nil, def, ""},
		{map[string]string{"size": "1G"}, 1 << 30, ""},
		{map[string]string{"Size": "100m"}, 100 << 20, ""},
		{map[string]string{"size": "10M"}, 0, "storage size 10M is below the minimum of 64MB"},
		{map[string]string{"size": "lots"}, 0, "invalid size: 'lots'"},
		{map[string]string{"inodes": "100"}, 0, "Unknown option inodes"},
	} {
		got, err := upperSizeOf(tt.opts, def)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err || !errdefs.IsInvalidArgument(err) {
				t.Errorf("%v: %v, want invalid argument %q", tt.opts, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%v: %d, %v; want %d", tt.opts, got, err, tt.want)
		}
	}
}
