package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/husk-vm/husk/runtime/vmm/vmmselect"
)

// TestReportVMMFix: a QEMU that is missing gets the fix for how it was
// looked for: from apt when PATH has none, from make qemu when --qemu
// names a binary that is not there.
func TestReportVMMFix(t *testing.T) {
	for _, tt := range []struct {
		name     string
		qemuFlag bool
		source   string
		fix      string
	}{
		{"PATH", false, "no qemu-system-x86_64 in PATH", "apt-get install qemu-system-x86"},
		{"--qemu", true, "--qemu /nope is not an executable: stat /nope: no such file or directory", "build it with make qemu"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			h := vmmselect.Host{QEMU: vmmselect.Binary{Source: tt.source}, CH: vmmselect.Binary{Path: "/usr/bin/cloud-hypervisor", Source: "PATH"}, Accel: "kvm"}
			reportVMM(&out, func(bool, string, string) {}, vmmselect.Auto, tt.qemuFlag, h)
			if !strings.Contains(out.String(), tt.source+"; "+tt.fix) {
				t.Errorf("report = %q, want %q then %q", out.String(), tt.source, tt.fix)
			}
		})
	}
}
