//go:build linux

package agent

import (
	"os"
	"testing"
)

func TestSmapsRSS(t *testing.T) {
	// A Go test binary has megabytes resident.
	if rss, ok := smapsRSS(os.Getpid()); !ok || rss < 1024 {
		t.Errorf("smapsRSS(self) = %d KiB, %v", rss, ok)
	}
	if _, ok := smapsRSS(1 << 30); ok {
		t.Error("smapsRSS of a missing process succeeded")
	}
}
