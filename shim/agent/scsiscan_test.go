package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestModuleArgs(t *testing.T) {
	const cmdline = "console=ttyS0 quiet scsi_mod.scan=manual scsi-mod.max_luns=1 virtio_net.napi_tx=0 scsi_mod. husk.debug"
	tests := []struct {
		name, want string
	}{
		{"scsi_mod", "scan=manual max_luns=1"},
		{"scsi-mod", "scan=manual max_luns=1"},
		{"virtio_net", "napi_tx=0"},
		{"virtio_scsi", ""},
		{"scsi", ""},
	}
	for _, tt := range tests {
		if got := moduleArgs(cmdline, tt.name); got != tt.want {
			t.Errorf("moduleArgs(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := moduleName("/husk/modules/scsi_mod.ko"); got != "scsi_mod" {
		t.Errorf("moduleName = %q", got)
	}
}

func TestManualSCSIScan(t *testing.T) {
	sys := t.TempDir()
	if manualSCSIScan(sys) {
		t.Fatal("manual without scsi_mod")
	}
	p := filepath.Join(sys, "module/scsi_mod/parameters/scan")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		val  string
		want bool
	}{{"async\n", false}, {"manual\n", true}} {
		if err := os.WriteFile(p, []byte(c.val), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := manualSCSIScan(sys); got != c.want {
			t.Errorf("scan=%q: manual = %v, want %v", c.val, got, c.want)
		}
	}
}

// TestScanSCSIHosts scans a fake sysfs whose hosts have devices at the
// first targets: the scan stops at the first empty one.
func TestScanSCSIHosts(t *testing.T) {
	sys := t.TempDir()
	for _, h := range []string{"host0", "host1"} {
		if err := os.MkdirAll(filepath.Join(sys, "class/scsi_host", h), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sys, "class/scsi_host", h, "scan"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"0:0:0:0", "0:0:1:0", "0:0:3:0"} {
		if err := os.MkdirAll(filepath.Join(sys, "bus/scsi/devices", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n, err := scanSCSIHosts(sys)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("found %d devices, want 2 (target 3 is past the gap)", n)
	}
	b, err := os.ReadFile(filepath.Join(sys, "class/scsi_host/host0/scan"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "0 2 0" {
		t.Errorf("host0's last scan %q, want target 2's", b)
	}
}
