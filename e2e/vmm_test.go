package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/harness"
)

// chRunHint is how to run the suite under cloud-hypervisor.
const chRunHint = "HUSK_CH_BINARY=/path/to/cloud-hypervisor make e2e"

// TestSuiteVMM names the VMM the whole suite ran its huskd under: each
// run uses one (QEMU under TCG by default, cloud-hypervisor on KVM when
// HUSK_CH_BINARY is set), and the subtest of the other skips, saying how
// to run it. The one that runs checks that huskd really chose that VMM.
func TestSuiteVMM(t *testing.T) {
	for _, vmm := range []string{"qemu", "cloud-hypervisor"} {
		t.Run(vmm, func(t *testing.T) {
			// Read here so go test keys its cache on it.
			ch := os.Getenv(chEnv)
			s := requireSuite(t)
			if s.Kind != harness.Huskd {
				t.Skipf("the %s reference has no VMM", s.Kind)
			}
			if s.VMM != vmm {
				if vmm == "cloud-hypervisor" {
					t.Skipf("this run's VMs are QEMU's (%s unset); to run the suite under cloud-hypervisor: %s", chEnv, chRunHint)
				}
				t.Skipf("this run's VMs are cloud-hypervisor's (%s=%s); unset it to run the suite under QEMU", chEnv, ch)
			}
			b, err := os.ReadFile(s.DaemonLog)
			if err != nil {
				t.Fatal(err)
			}
			want := `msg="vmm chosen" vmm=` + vmm
			if !strings.Contains(string(b), want) {
				t.Errorf("the daemon log has no %q", want)
			}
		})
	}
}
