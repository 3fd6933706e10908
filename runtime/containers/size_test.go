package containers

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
)

// TestFillSizesOfRemoved: a container removed while `docker ps -s` sizes
// the listing took its upper disk with it, and is left at 0 without a
// warning; one whose disk is missing otherwise is warned of.
func TestFillSizesOfRemoved(t *testing.T) {
	for _, removed := range []bool{true, false} {
		var logged bytes.Buffer
		m := &Manager{byID: map[string]*ctr{}, log: slog.New(slog.NewTextHandler(&logged, nil))}
		c := &ctr{m: m, dir: t.TempDir(), removed: removed, rec: Record{ID: "aaaa"}}
		m.byID["aaaa"] = c
		list := []container.Summary{{ID: "aaaa", SizeRw: -1}}
		m.fillSizes(context.Background(), list)
		if warned := strings.Contains(logged.String(), "size a container's layer"); warned == removed {
			t.Errorf("removed %v: warned %v:\n%s", removed, warned, logged.String())
		}
		if list[0].SizeRw != -1 {
			t.Errorf("removed %v: SizeRw %d, want it left as it was", removed, list[0].SizeRw)
		}
	}
}
