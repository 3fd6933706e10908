package qemu

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestNoHugePagesUnderTCG sets the flag on the test's own process, which
// is what huskd's children inherit; nothing else in this package's tests
// depends on huge pages.
func TestNoHugePagesUnderTCG(t *testing.T) {
	thpOff := func() bool {
		t.Helper()
		v, err := unix.PrctlRetInt(unix.PR_GET_THP_DISABLE, 0, 0, 0, 0)
		if err != nil {
			t.Fatalf("read the huge page flag: %v", err)
		}
		return v == 1
	}
	if thpOff() {
		t.Skip("huge pages were already off for this process")
	}
	if err := NoHugePagesUnderTCG("kvm"); err != nil {
		t.Fatal(err)
	}
	if thpOff() {
		t.Fatal("huge pages turned off under KVM")
	}
	if err := NoHugePagesUnderTCG("tcg"); err != nil {
		t.Fatal(err)
	}
	if !thpOff() {
		t.Fatal("huge pages still on under TCG")
	}
}
