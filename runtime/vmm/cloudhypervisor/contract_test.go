package cloudhypervisor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
)

func testSpec(t *testing.T) *spec {
	t.Helper()
	s, err := loadSpec(needSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRequestBodiesMatchSpec validates every request body the driver can
// send, for a table of representative VMs, against the API description.
func TestRequestBodiesMatchSpec(t *testing.T) {
	s := testSpec(t)
	dir := t.TempDir()
	configs := []struct {
		name string
		opts Options
		cfg  vmm.Config
	}{
		{"minimal", Options{}, vmm.Config{ID: "a", Dir: dir, Kernel: "/boot/vmlinuz", Initramfs: "/i.cpio"}},
		{"disks and nets", Options{}, vmm.Config{
			ID: "b", Dir: dir, Kernel: "/boot/vmlinuz", Initramfs: "/i.cpio", Cmdline: "husk.debug",
			MemoryMiB: 512, CPUs: 2, Accel: "kvm",
			Disks: []vmm.Disk{{Path: "/images/base.ext4", ReadOnly: true, Serial: "base"}, {Path: "/sb/upper.ext4", Serial: "upper"}},
			Nets:  []vmm.Net{{Tap: "husk0", MAC: "52:54:00:12:34:56"}, {Tap: "husk1", MAC: "52:54:00:12:34:57"}},
		}},
		{"virtio-fs shares", Options{}, vmm.Config{
			ID: "d", Dir: dir, Kernel: "/boot/vmlinuz", Initramfs: "/i.cpio",
			Shares: []vmm.Share{{Tag: "husk-0", Socket: "/vm/fs0.sock"}, {Tag: "husk-1", Socket: "fs1.sock"}},
		}},
		{"resizable", Options{MaxCPUs: 4, MemoryHotplugMiB: 1024}, vmm.Config{
			ID: "c", Dir: dir, Kernel: "k", Initramfs: "i", CPUs: 1,
			Disks: []vmm.Disk{{Path: "relative.ext4", Serial: strings.Repeat("s", maxSerial)}},
		}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			d, err := New(c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate(c.cfg); err != nil {
				t.Fatal(err)
			}
			vc, err := d.vmConfig(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.checkBody("vm.create", vc); err != nil {
				t.Errorf("vm.create body does not match the API description: %v", err)
			}
			if len(vc.Fs) != len(c.cfg.Shares) || (len(vc.Fs) > 0 && !vc.Memory.Shared) {
				t.Errorf("%d shares gave %d fs devices, shared memory %t: virtio-fs needs both", len(c.cfg.Shares), len(vc.Fs), vc.Memory.Shared)
			}
			if len(vc.Disks) > 0 && vc.Disks[0].Readonly != c.cfg.Disks[0].ReadOnly {
				t.Errorf("disk 0 readonly %t, want %t", vc.Disks[0].Readonly, c.cfg.Disks[0].ReadOnly)
			}
		})
	}
	bodies := []struct {
		endpoint string
		body     any
	}{
		{"vm.boot", nil},
		{"vm.pause", nil},
		{"vm.resume", nil},
		{"vm.shutdown", nil},
		{"vmm.shutdown", nil},
		{"vm.snapshot", &VmSnapshotConfig{DestinationURL: "file:///var/lib/husk/snap/1"}},
		{"vm.restore", &RestoreConfig{SourceURL: "file:///x/restore", MemoryRestoreMode: RestoreCopy, Resume: true}},
		{"vm.restore", &RestoreConfig{SourceURL: "file:///x/restore", MemoryRestoreMode: RestoreOnDemand, Resume: true}},
		{"vm.resize", &VmResize{DesiredVCPUs: 2}},
		{"vm.resize", &VmResize{DesiredRAM: 512 << 20}},
		{"vm.resize", &VmResize{DesiredVCPUs: 4, DesiredRAM: 1 << 30}},
		{"vm.add-net", &NetConfig{Tap: "hk0123456789ab1", MAC: "02:42:0a:7c:00:03", ID: "net1"}},
		{"vm.remove-device", &VmRemoveDevice{ID: "net1"}},
		{"vm.add-disk", &DiskConfig{Path: "/images/base.ext4", Readonly: true, Serial: "base", ID: "disk0"}},
		{"vm.add-disk", &DiskConfig{Path: "/sb/upper.ext4", Serial: strings.Repeat("s", maxSerial), ID: "disk1"}},
	}
	for _, b := range bodies {
		if err := s.checkBody(b.endpoint, b.body); err != nil {
			t.Errorf("%s %+v does not match the API description: %v", b.endpoint, b.body, err)
		}
	}
}

// TestSpecIsStrict shows the checks above can fail: bodies that
// cloud-hypervisor would not take are refused.
func TestSpecIsStrict(t *testing.T) {
	s := testSpec(t)
	bad := []struct {
		name, endpoint string
		body           any
	}{
		{"unknown field", "vm.restore", map[string]any{"source_url": "file:///x", "net_fds": []any{}}},
		{"bad enum", "vm.restore", map[string]any{"source_url": "file:///x", "memory_restore_mode": "ondemand"}},
		{"missing required", "vm.create", map[string]any{"cpus": map[string]any{"boot_vcpus": 1, "max_vcpus": 1}}},
		{"cid too small", "vm.create", map[string]any{"payload": map[string]any{}, "vsock": map[string]any{"cid": 2, "socket": "v"}}},
		{"body where none is taken", "vm.pause", map[string]any{}},
	}
	for _, b := range bad {
		err := s.checkBody(b.endpoint, b.body)
		if err == nil {
			t.Errorf("%s: %s %v passed validation", b.name, b.endpoint, b.body)
			continue
		}
		t.Logf("%s: refused: %.200s", b.name, err)
	}
}

func TestRewriteConfig(t *testing.T) {
	snap := `{"payload":{"kernel":"/old/k","initramfs":"/old/i","cmdline":"c"},
	  "disks":[{"path":"/old/base","readonly":true,"serial":"base","direct":false},{"path":"/old/upper","serial":"upper"}],
	  "net":[{"tap":"old0","mac":"52:54:00:00:00:01","fds":[7,8]}],
	  "vsock":{"cid":3,"socket":"/old/dir/vsock.sock"},
	  "serial":{"mode":"File","file":"/old/dir/console.log"},
	  "future_field":{"x":1}}`
	vc := &VmConfig{
		Payload: PayloadConfig{Kernel: "/new/k", Initramfs: "/new/i"},
		Disks:   []DiskConfig{{Path: "/images/base", Readonly: true}, {Path: "/new/upper"}},
		Net:     []NetConfig{{Tap: "new0", MAC: "52:54:00:99:99:99"}},
		Vsock:   &VsockConfig{CID: 3, Socket: vsockSocket},
		Serial:  &SerialConfig{Mode: ModeFile, File: consoleLog},
	}
	out, err := RewriteConfig([]byte(snap), vc)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := `{"payload":{"kernel":"/new/k","initramfs":"/new/i","cmdline":"c"},
	  "disks":[{"path":"/images/base","readonly":true,"serial":"base","direct":false},{"path":"/new/upper","serial":"upper"}],
	  "net":[{"tap":"new0","mac":"52:54:00:00:00:01"}],
	  "vsock":{"cid":3,"socket":"vsock.sock"},
	  "serial":{"mode":"File","file":"console.log"},
	  "future_field":{"x":1}}`
	var w map[string]any
	json.Unmarshal([]byte(want), &w)
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("rewritten:\n%s\nwant\n%s", gb, wb)
	}

	mismatch := []struct {
		name string
		mod  func(*VmConfig)
	}{
		{"fewer disks", func(v *VmConfig) { v.Disks = v.Disks[:1] }},
		{"more nets", func(v *VmConfig) { v.Net = append(v.Net, NetConfig{Tap: "x"}) }},
		{"readonly differs", func(v *VmConfig) { v.Disks[1].Readonly = true }},
	}
	for _, m := range mismatch {
		v := *vc
		v.Disks = append([]DiskConfig(nil), vc.Disks...)
		v.Net = append([]NetConfig(nil), vc.Net...)
		m.mod(&v)
		if _, err := RewriteConfig([]byte(snap), &v); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: err = %v, want InvalidArgument", m.name, err)
		}
	}
}
