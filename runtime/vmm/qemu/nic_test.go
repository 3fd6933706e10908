package qemu

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
)

func TestQEMUArgsNICSlots(t *testing.T) {
	cfg := vmm.Config{ID: "c", Dir: t.TempDir(), Kernel: "/k", Initramfs: "/i",
		Nets: []vmm.Net{{Tap: "tap0", MAC: "02:42:0a:00:00:02"}, {Tap: "tap1", MAC: "02:42:0a:00:00:03"}}}
	tests := []struct {
		name  string
		slots []int
		want  []string
	}{
		{"boot", nil, []string{
			"virtio-net-pci,romfile=,id=vnet0,netdev=net0,mac=02:42:0a:00:00:02,bus=nicbridge,addr=0x1",
			"virtio-net-pci,romfile=,id=vnet1,netdev=net1,mac=02:42:0a:00:00:03,bus=nicbridge,addr=0x2",
		}},
		// A restore of a VM that lost its first NIC and gained one in
		// slot 2 by hot-plug.
		{"restore", []int{1, 2}, []string{
			"virtio-net-pci,romfile=,id=vnet1,netdev=net1,mac=02:42:0a:00:00:02,bus=nicbridge,addr=0x2",
			"virtio-net-pci,romfile=,id=vnet2,netdev=net2,mac=02:42:0a:00:00:03,bus=nicbridge,addr=0x3",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := qemuArgs(argSpec{machine: MachineQ35, netSlots: tt.slots}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var nics []string
			for _, d := range argAfter(args, "-device") {
				if strings.HasPrefix(d, "virtio-net-pci,") {
					nics = append(nics, d)
				}
			}
			if !slices.Equal(nics, tt.want) {
				t.Errorf("NIC devices %q, want %q", nics, tt.want)
			}
		})
	}
	for _, bad := range [][]int{{0}, {0, maxNets}} {
		if _, err := qemuArgs(argSpec{machine: MachineQ35, netSlots: bad}, cfg); !errdefs.IsInvalidArgument(err) {
			t.Errorf("slots %v: err %v, want invalid argument", bad, err)
		}
	}
}

// hotplugMachine is a Machine on a Q35 VM with one NIC in slot 0 whose
// monitor is a fake in dir; TAPs are plain files.
func hotplugMachine(t *testing.T) *Machine {
	t.Helper()
	dir := t.TempDir()
	m := newMachine(dir, nil, 42, slog.New(slog.DiscardHandler))
	m.layout = &layout{Machine: MachineQ35, Nets: 1, NICs: []layoutNIC{{Slot: 0, MAC: "02:42:0a:7b:00:02"}}, Slots: pciSlotPlan}
	m.openTap = func(name string) (*os.File, error) {
		return os.Create(filepath.Join(dir, "tap-"+name))
	}
	return m
}

func readLayout(t *testing.T, dir string) layout {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, layoutFile))
	if err != nil {
		t.Fatal(err)
	}
	var l layout
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestNICHotplugQMP checks the QMP conversation of AddNIC and RemoveNIC
// against a fake monitor, and what the layout records after each.
func TestNICHotplugQMP(t *testing.T) {
	ctx := context.Background()
	m := hotplugMachine(t)
	ok := []string{`{"return": {}, "id": $ID}`}
	seen := fakeQMP(t, m.path(qmpSocket), map[string][]string{
		"qmp_capabilities": ok, "getfd": ok, "netdev_add": ok, "device_add": ok,
	})
	if err := m.AddNIC(ctx, vmm.Net{Tap: "hkabc1", MAC: "02:42:0A:7C:00:03"}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"qmp_capabilities",
		`getfd{"fdname":"husk-nic1"}`,
		`netdev_add{"fd":"husk-nic1","id":"net1","type":"tap"}`,
		`device_add{"addr":"0x2","bus":"nicbridge","driver":"virtio-net-pci","id":"vnet1","mac":"02:42:0a:7c:00:03","netdev":"net1","romfile":""}`,
	}
	if got := <-seen; !slices.Equal(got, want) {
		t.Errorf("AddNIC sent %q, want %q", got, want)
	}
	l := readLayout(t, m.dir)
	wantNICs := []layoutNIC{{0, "02:42:0a:7b:00:02"}, {1, "02:42:0a:7c:00:03"}}
	if l.Nets != 2 || !slices.Equal(l.NICs, wantNICs) {
		t.Errorf("layout after AddNIC: %d nets %+v, want 2 %+v", l.Nets, l.NICs, wantNICs)
	}

	// Unplug the boot NIC: QEMU answers device_del at once and sends
	// DEVICE_DELETED when the guest has ejected it, first for the
	// virtio backend (no device name), then for the device.
	seen = fakeQMP(t, m.path(qmpSocket), map[string][]string{
		"qmp_capabilities": ok,
		"device_del": {
			`{"return": {}, "id": $ID}`,
			`{"event": "DEVICE_DELETED", "data": {"path": "/machine/peripheral/vnet0/virtio-backend"}, "timestamp": {"seconds": 1, "microseconds": 0}}`,
			`{"event": "DEVICE_DELETED", "data": {"device": "vnet0", "path": "/machine/peripheral/vnet0"}, "timestamp": {"seconds": 1, "microseconds": 5}}`,
		},
		"netdev_del": ok,
	})
	if err := m.RemoveNIC(ctx, "02:42:0a:7b:00:02"); err != nil {
		t.Fatal(err)
	}
	want = []string{"qmp_capabilities", `device_del{"id":"vnet0"}`, `netdev_del{"id":"net0"}`}
	if got := <-seen; !slices.Equal(got, want) {
		t.Errorf("RemoveNIC sent %q, want %q", got, want)
	}
	l = readLayout(t, m.dir)
	if got := l.netSlots(); l.Nets != 1 || !slices.Equal(got, []int{1}) {
		t.Errorf("layout after RemoveNIC: %d nets in slots %v, want 1 in [1]", l.Nets, got)
	}
	if err := m.RemoveNIC(ctx, "02:42:0a:7b:00:02"); !errdefs.IsNotFound(err) {
		t.Errorf("RemoveNIC of a NIC that is gone: %v, want not found", err)
	}
}

// TestAddNICRollsBack: when QEMU refuses the device, the netdev made for
// it goes and the layout is unchanged.
func TestAddNICRollsBack(t *testing.T) {
	ctx := context.Background()
	m := hotplugMachine(t)
	ok := []string{`{"return": {}, "id": $ID}`}
	seen := fakeQMP(t, m.path(qmpSocket), map[string][]string{
		"qmp_capabilities": ok, "getfd": ok, "netdev_add": ok, "netdev_del": ok,
		"device_add": {`{"error": {"class": "GenericError", "desc": "PCI: slot 5 function 0 not available"}, "id": $ID}`},
	})
	err := m.AddNIC(ctx, vmm.Net{Tap: "hkabc1", MAC: "02:42:0a:7c:00:03"})
	if err == nil || !strings.Contains(err.Error(), "slot 5") {
		t.Fatalf("AddNIC: %v, want QEMU's refusal", err)
	}
	got := <-seen
	if len(got) == 0 || got[len(got)-1] != `netdev_del{"id":"net1"}` {
		t.Errorf("after a refused device_add the driver sent %q, want a netdev_del last", got)
	}
	if _, err := os.Stat(filepath.Join(m.dir, layoutFile)); !os.IsNotExist(err) {
		t.Errorf("a failed AddNIC wrote a layout: %v", err)
	}
	if n := len(m.layout.NICs); n != 1 {
		t.Errorf("layout has %d NICs after a failed AddNIC, want 1", n)
	}

	m.layout = &layout{Machine: MachineMicroVM}
	if err := m.AddNIC(ctx, vmm.Net{Tap: "t", MAC: "02:42:0a:7c:00:03"}); !errdefs.IsNotImplemented(err) {
		t.Errorf("AddNIC on microvm: %v, want not implemented", err)
	}
}
