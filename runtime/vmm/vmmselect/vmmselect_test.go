package vmmselect

import (
	"errors"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	ch := Binary{Path: "/opt/ch/cloud-hypervisor", Source: CHBinaryEnv}
	noCH := Binary{Source: "no cloud-hypervisor in PATH and HUSK_CH_BINARY unset"}
	qemu := Binary{Path: "/usr/bin/qemu-system-x86_64", Source: "PATH"}
	noQEMU := Binary{Source: "no qemu-system-x86_64 in PATH"}
	tests := []struct {
		name      string
		requested string
		host      Host
		vmm       string
		reason    string // substring of the reason, or of the error
		err       bool
	}{
		{"auto: ch and kvm", "auto", Host{CH: ch, QEMU: qemu, Accel: "kvm", AccelReason: "KVM booted in 1s"}, CloudHypervisor,
			"cloud-hypervisor found (HUSK_CH_BINARY) and the accelerator is kvm (KVM booted in 1s)", false},
		{"auto: ch without qemu", "", Host{CH: ch, QEMU: noQEMU, Accel: "kvm"}, CloudHypervisor, "accelerator is kvm", false},
		{"auto: ch but tcg", "auto", Host{CH: ch, QEMU: qemu, Accel: "tcg", AccelReason: "no /dev/kvm"}, QEMU,
			"cloud-hypervisor found (HUSK_CH_BINARY) but the accelerator is tcg (no /dev/kvm)", false},
		{"auto: ch, accel unknown", "auto", Host{CH: ch, QEMU: qemu}, QEMU, "accelerator is not decided yet", false},
		{"auto: no ch", "auto", Host{CH: noCH, QEMU: qemu, Accel: "kvm"}, QEMU, "no cloud-hypervisor binary (no cloud-hypervisor in PATH", false},
		{"auto: nothing", "auto", Host{CH: noCH, QEMU: noQEMU, Accel: "kvm"}, "", "no qemu-system-x86_64 in PATH, and no cloud-hypervisor", true},
		{"auto: ch on tcg, no qemu", "auto", Host{CH: ch, QEMU: noQEMU, Accel: "tcg"}, "", "cloud-hypervisor needs kvm but the accelerator is tcg", true},
		{"qemu", "qemu", Host{CH: ch, QEMU: qemu, Accel: "kvm"}, QEMU, "requested", false},
		{"qemu missing", "qemu", Host{CH: ch, QEMU: noQEMU}, "", "--vmm qemu: no qemu-system-x86_64 in PATH", true},
		{"ch", "cloud-hypervisor", Host{CH: ch, QEMU: qemu, Accel: "kvm"}, CloudHypervisor, "requested", false},
		{"ch, accel unknown", "cloud-hypervisor", Host{CH: ch, QEMU: qemu}, CloudHypervisor, "requested", false},
		{"ch missing", "cloud-hypervisor", Host{CH: noCH, QEMU: qemu, Accel: "kvm"}, "", "--vmm cloud-hypervisor: no binary", true},
		{"ch on tcg", "cloud-hypervisor", Host{CH: ch, QEMU: qemu, Accel: "tcg", AccelReason: "requested"}, "", "runs only on kvm", true},
		{"unknown", "firecracker", Host{CH: ch, QEMU: qemu}, "", `unknown --vmm "firecracker"`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Decide(tt.requested, tt.host)
			if tt.err {
				if err == nil || !strings.Contains(err.Error(), tt.reason) {
					t.Fatalf("err = %v, want one containing %q (decision %+v)", err, tt.reason, d)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.VMM != tt.vmm || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("decision %+v, want %s because of %q", d, tt.vmm, tt.reason)
			}
			wantBin := tt.host.QEMU.Path
			if tt.vmm == CloudHypervisor {
				wantBin = tt.host.CH.Path
			}
			if d.Binary != wantBin {
				t.Errorf("binary %q, want %q", d.Binary, wantBin)
			}
		})
	}
}

func TestFind(t *testing.T) {
	look := func(have ...string) func(string) (string, error) {
		return func(name string) (string, error) {
			for _, h := range have {
				if h == name || strings.HasSuffix(h, "/"+name) {
					return h, nil
				}
			}
			return "", errors.New("not found")
		}
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == CHBinaryEnv {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		name   string
		env    string
		have   []string
		path   string
		source string
	}{
		{"env wins", "/opt/ch", []string{"/opt/ch", "/usr/bin/cloud-hypervisor"}, "/opt/ch", CHBinaryEnv},
		{"PATH", "", []string{"/usr/bin/cloud-hypervisor"}, "/usr/bin/cloud-hypervisor", "PATH"},
		{"env names nothing", "/nope", []string{"/usr/bin/cloud-hypervisor"}, "", "HUSK_CH_BINARY=/nope is not an executable"},
		{"none", "", nil, "", "no cloud-hypervisor in PATH and HUSK_CH_BINARY unset"},
	}
	for _, tt := range tests {
		b := FindCH(env(tt.env), look(tt.have...))
		if b.Path != tt.path || !strings.Contains(b.Source, tt.source) {
			t.Errorf("%s: %+v, want path %q source ~%q", tt.name, b, tt.path, tt.source)
		}
	}
	qemuTests := []struct {
		name, flag   string
		have         []string
		path, source string
	}{
		{"--qemu wins", "/opt/qemu/bin/qemu-system-x86_64", []string{"/opt/qemu/bin/qemu-system-x86_64", "/usr/bin/qemu-system-x86_64"}, "/opt/qemu/bin/qemu-system-x86_64", "--qemu"},
		{"PATH", "", []string{"/usr/bin/qemu-system-x86_64"}, "/usr/bin/qemu-system-x86_64", "PATH"},
		{"--qemu names nothing", "/nope", []string{"/usr/bin/qemu-system-x86_64"}, "", "--qemu /nope is not an executable"},
		{"none", "", nil, "", "no qemu-system-x86_64 in PATH"},
	}
	for _, tt := range qemuTests {
		b := FindQEMU(tt.flag, look(tt.have...))
		if b.Path != tt.path || !strings.Contains(b.Source, tt.source) {
			t.Errorf("FindQEMU %s: %+v, want path %q source ~%q", tt.name, b, tt.path, tt.source)
		}
	}
}
