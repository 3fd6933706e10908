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
// RAM. Under TCG they bought nothing measurable and cost memory: each
// vCPU's partly filled buffer region, and some of QEMU's own allocations,
// were rounded up to 2 MiB. A template-started sandbox held 62.7 MiB
// beyond its guest without them against 65.1 MiB with them, and starts
// took as long (bench/README.md, Memory). Under KVM huge pages back the
// guest's RAM in the host's page tables, so they stay on.
func NoHugePagesUnderTCG(accel string) error {
	if accel != "tcg" {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_THP_DISABLE, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("turn transparent huge pages off: %w", err)
	}
	return nil
}
