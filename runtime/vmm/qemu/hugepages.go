package qemu

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// NoHugePagesUnderTCG turns transparent huge pages off for the calling
// process when its guests run under TCG ("tcg"); the QEMUs it starts
// afterwards inherit that across exec. It changes the whole process, so
// it is the program's to call, once the accelerator is known: huskd, and
// the bench for its raw QEMU boots.
//
// QEMU asks for huge pages for TCG's translation buffer and for guest
// RAM. Under TCG they cost memory: each vCPU's partly filled buffer
// region, and some of QEMU's own allocations, are rounded up to 2 MiB, and
// khugepaged collapses more of them as a sandbox runs. A template-started
// sandbox held 62.7 MiB beyond its guest without them against 65.1 MiB
// with them. They save page faults, which are dear on this project's
// machines: a lone template start took ~30 ms less with them, but ten
// concurrent starts took ~9% longer (bench/README.md, Page faults). Under
// KVM huge pages back the guest's RAM in the host's page tables, so they
// stay on.
func NoHugePagesUnderTCG(accel string) error {
	if accel != "tcg" {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_THP_DISABLE, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("turn transparent huge pages off: %w", err)
	}
	return nil
}
