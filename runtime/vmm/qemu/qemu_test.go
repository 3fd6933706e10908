package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/kernel"
	"github.com/husk-vm/husk/runtime/vmm"
)

// argAfter returns every value that follows flag in args.
func argAfter(args []string, flag string) []string {
	var out []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			out = append(out, args[i+1])
		}
	}
	return out
}

func TestQEMUArgs(t *testing.T) {
	dir := t.TempDir()
	cfg := vmm.Config{
		ID:        "c1,x",
		Dir:       dir,
		Kernel:    "/boot/vmlinuz",
		Initramfs: "/cache/initramfs.cpio",
		Cmdline:   "husk.debug=1",
		MemoryMiB: 512,
		CPUs:      2,
		Disks: []vmm.Disk{
			{Path: "/images/base,1.ext4", ReadOnly: true, Serial: "base"},
			{Path: "/sandboxes/upper.ext4", Serial: "upper"},
		},
	}
	args, err := qemuArgs(argSpec{machine: MachineQ35}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		flag string
		want []string
	}{
		{"-M", []string{"q35,sata=off,smbus=off"}},
		{"-accel", []string{"tcg"}},
		{"-cpu", []string{"max,erms=off"}},
		{"-m", []string{"512"}},
		{"-smp", []string{"2"}},
		{"-name", []string{"c1,,x,process=husk-c1,,x,debug-threads=on"}},
		{"-append", []string{"console=ttyS0 panic=-1 quiet " + kernel.BootArgs + " scsi_mod.scan=manual husk.debug=1"}},
		{"-drive", []string{
			"file=/dev/fdset/1,file.locking=off,if=none,format=raw,id=disk0,readonly=on",
			"file=/dev/fdset/2,file.locking=off,if=none,format=raw,id=disk1,readonly=off",
		}},
		// The read-only disk has one descriptor, the writable one a
		// read-write and a read-only one, in openDisks's order.
		{"-add-fd", []string{"fd=3,set=1", "fd=4,set=2", "fd=5,set=2"}},
		{"-qmp", []string{"unix:qmp.sock,server=on,wait=off"}},
		{"-nic", []string{"none"}},
	}
	for _, c := range checks {
		if got := argAfter(args, c.flag); !slices.Equal(got, c.want) {
			t.Errorf("%s = %q, want %q", c.flag, got, c.want)
		}
	}
	devices := argAfter(args, "-device")
	for _, want := range []string{
		// Fixed slots and targets: hot-plugged disks land in the same
		// ones.
		"virtio-scsi-pci,id=scsi0,addr=0x10",
		// The NIC bridge is there without NICs: one can be hot-plugged.
		"pci-bridge,id=nicbridge,chassis_nr=2,addr=0x4",
		"scsi-hd,bus=scsi0.0,channel=0,scsi-id=0,lun=0,id=vdisk0,drive=disk0,serial=base",
		"scsi-hd,bus=scsi0.0,channel=0,scsi-id=1,lun=0,id=vdisk1,drive=disk1,serial=upper",
		"virtio-serial-pci,id=vserial,max_ports=2,addr=0x3",
		"virtserialport,bus=vserial.0,chardev=agent,name=husk.agent",
	} {
		if !slices.Contains(devices, want) {
			t.Errorf("no -device %s in %q", want, devices)
		}
	}
	// Socket paths must be relative: QEMU runs in Dir, whose absolute
	// path may exceed the unix socket limit.
	for _, c := range argAfter(args, "-chardev") {
		if strings.Contains(c, "path=/") {
			t.Errorf("chardev with an absolute path: %s", c)
		}
	}
	for _, f := range []string{"-nodefaults", "-no-user-config", "-no-reboot"} {
		if !slices.Contains(args, f) {
			t.Errorf("missing %s", f)
		}
	}

	args, err = qemuArgs(argSpec{machine: MachineMicroVM}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := argAfter(args, "-M"); !slices.Equal(got, []string{"microvm"}) {
		t.Errorf("-M = %q, want microvm", got)
	}
	devices = argAfter(args, "-device")
	for _, want := range []string{"virtio-blk-device,id=vdisk0,drive=disk0,serial=base", "virtio-serial-device,id=vserial,max_ports=2"} {
		if !slices.Contains(devices, want) {
			t.Errorf("microvm: no -device %s in %q", want, devices)
		}
	}

	cfg.Accel = "kvm"
	args, err = qemuArgs(argSpec{machine: MachineQ35}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := argAfter(args, "-cpu"); !slices.Equal(got, []string{"host"}) {
		t.Errorf("kvm -cpu = %q, want host", got)
	}
}

func TestQEMUArgsConfine(t *testing.T) {
	cfg := vmm.Config{ID: "c", Kernel: "/k", Initramfs: "/i"}
	args, err := qemuArgs(argSpec{machine: MachineQ35, runAs: "nobody"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := argAfter(args, "-sandbox"); !slices.Equal(got, []string{"on,obsolete=deny,spawn=deny,resourcecontrol=deny"}) {
		t.Errorf("-sandbox = %q", got)
	}
	if got := argAfter(args, "-runas"); !slices.Equal(got, []string{"nobody"}) {
		t.Errorf("-runas = %q, want nobody", got)
	}
	args, err = qemuArgs(argSpec{machine: MachineQ35}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := argAfter(args, "-runas"); len(got) != 0 {
		t.Errorf("-runas = %q without a user", got)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := vmm.Config{ID: "x", Dir: dir, Kernel: "k", Initramfs: "i"}
	tests := []struct {
		name string
		mod  func(*vmm.Config)
		ok   bool
	}{
		{"good", func(*vmm.Config) {}, true},
		{"no dir", func(c *vmm.Config) { c.Dir = "" }, false},
		{"missing dir", func(c *vmm.Config) { c.Dir = filepath.Join(dir, "nope") }, false},
		{"no kernel", func(c *vmm.Config) { c.Kernel = "" }, false},
		{"no initramfs", func(c *vmm.Config) { c.Initramfs = "" }, false},
		{"bad accel", func(c *vmm.Config) { c.Accel = "hvf" }, false},
		{"long serial", func(c *vmm.Config) { c.Disks = []vmm.Disk{{Path: "d", Serial: strings.Repeat("s", 21)}} }, false},
		{"20-byte serial", func(c *vmm.Config) { c.Disks = []vmm.Disk{{Path: "d", Serial: strings.Repeat("s", 20)}} }, true},
		{"empty disk", func(c *vmm.Config) { c.Disks = []vmm.Disk{{Serial: "s"}} }, false},
		{"empty removable disk", func(c *vmm.Config) { c.Disks = []vmm.Disk{{Serial: "s", Removable: true}} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mod(&cfg)
			err := validate(cfg, MachineQ35)
			if (err == nil) != tt.ok {
				t.Fatalf("validate err = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Fatalf("err %v is not InvalidArgument", err)
			}
		})
	}
}

// fakeQMP serves one QMP session on a socket in dir, answering with
// script: for each command it receives, the lines to send back (with
// "$ID" replaced by the command's id).
func fakeQMP(t *testing.T, path string, script map[string][]string) <-chan []string {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []string, 1)
	go func() {
		c, err := l.Accept()
		// One session only: closing (and so unlinking) the socket before
		// got is sent lets a test serve the same path again at once.
		l.Close()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		c.Write([]byte(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": []}}` + "\n"))
		var seen []string
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			var req struct {
				Execute   string          `json:"execute"`
				Arguments json.RawMessage `json:"arguments"`
				ID        json.RawMessage `json:"id"`
			}
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				break
			}
			seen = append(seen, req.Execute+string(req.Arguments))
			for _, line := range script[req.Execute] {
				c.Write([]byte(strings.ReplaceAll(line, "$ID", string(req.ID)) + "\n"))
			}
		}
		got <- seen
	}()
	return got
}

func TestQMPClient(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	seen := fakeQMP(t, path, map[string][]string{
		"qmp_capabilities": {`{"return": {}, "id": $ID}`},
		"query-status": {
			`{"event": "STOP", "data": {}, "timestamp": {"seconds": 1, "microseconds": 2}}`,
			`{"return": {}, "id": 999}`,
			`{"return": {"status": "running", "running": true}, "id": $ID}`,
		},
		"migrate": {`{"error": {"class": "GenericError", "desc": "no uri"}, "id": $ID}`},
		"cont":    {`{"return": {}, "id": $ID}`, `{"event": "RESUME", "timestamp": {"seconds": 3, "microseconds": 0}}`},
	})
	q, err := DialQMP(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Status string }
	if err := q.Execute(ctx, "query-status", nil, &st); err != nil {
		t.Fatal(err)
	}
	if st.Status != "running" {
		t.Errorf("status %q, want running (the stray id 999 reply must be skipped)", st.Status)
	}
	err = q.Execute(ctx, "migrate", map[string]string{"uri": "x"}, nil)
	var qe *QMPError
	if !errors.As(err, &qe) || qe.Class != "GenericError" || qe.Desc != "no uri" {
		t.Errorf("migrate err = %v, want QMPError GenericError", err)
	}
	if err := q.Execute(ctx, "cont", nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"STOP", "RESUME"} {
		ev, err := q.NextEvent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Event != want {
			t.Errorf("event %s, want %s", ev.Event, want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := q.NextEvent(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("NextEvent on a cancelled context: %v", err)
	}
	q.Close()
	want := []string{"qmp_capabilities", "query-status", `migrate{"uri":"x"}`, "cont"}
	if got := <-seen; !slices.Equal(got, want) {
		t.Errorf("server saw %q, want %q", got, want)
	}
}

func TestReattachNothing(t *testing.T) {
	d := New(Options{})
	dir := t.TempDir()
	if _, err := d.Reattach(context.Background(), dir); !errdefs.IsNotFound(err) {
		t.Errorf("no pid file: err = %v, want NotFound", err)
	}
	// A live process that is not QEMU in this dir: the test itself.
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Reattach(context.Background(), dir); !errdefs.IsNotFound(err) {
		t.Errorf("foreign pid: err = %v, want NotFound", err)
	}
}

func TestQEMUArgsShares(t *testing.T) {
	dir := t.TempDir()
	cfg := vmm.Config{
		ID: "c1", Dir: dir, Kernel: "/boot/vmlinuz", Initramfs: "/initrd", MemoryMiB: 384,
		Shares: []vmm.Share{
			{Tag: "husk0", Socket: filepath.Join(dir, "fs0.sock")},
			{Tag: "husk1", Socket: "/elsewhere/a,b.sock"},
		},
		// NICs too, so the pinning check below covers them.
		Nets: []vmm.Net{{Tap: "tap0", MAC: "02:42:0a:00:00:02"}, {Tap: "tap1", MAC: "02:42:0a:00:00:03"}},
	}
	args, err := qemuArgs(argSpec{machine: MachineQ35, runAs: "nobody"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := argAfter(args, "-object"), []string{"memory-backend-memfd,id=mem,size=384M,share=on"}; !slices.Equal(got, want) {
		t.Errorf("-object = %q, want %q", got, want)
	}
	if got, want := argAfter(args, "-machine"), []string{"memory-backend=mem"}; !slices.Equal(got, want) {
		t.Errorf("-machine = %q, want %q", got, want)
	}
	chardevs := argAfter(args, "-chardev")
	for _, want := range []string{"socket,id=fs0,path=fs0.sock", "socket,id=fs1,path=/elsewhere/a,,b.sock"} {
		if !slices.Contains(chardevs, want) {
			t.Errorf("-chardev %q missing from %q", want, chardevs)
		}
	}
	devices := argAfter(args, "-device")
	for _, want := range []string{
		"pci-bridge,id=fsbridge,chassis_nr=1,addr=0x2",
		"vhost-user-fs-pci,chardev=fs0,tag=husk0,bus=fsbridge,addr=0x1",
		"vhost-user-fs-pci,chardev=fs1,tag=husk1,bus=fsbridge,addr=0x2",
	} {
		if !slices.Contains(devices, want) {
			t.Errorf("-device %q missing from %q", want, devices)
		}
	}
	// Every device is pinned: one left to QEMU's choice takes the first
	// free slot, which may be one a later device is pinned to (QEMU then
	// refuses to start), and it would move between VMs of one snapshot.
	slots := map[string]string{}
	for _, d := range devices {
		if d == "virtserialport,bus=vserial.0,chardev=agent,name=husk.agent" {
			continue // on the virtio-serial bus, not PCI
		}
		_, addr, ok := strings.Cut(d, ",addr=")
		if !ok {
			t.Errorf("-device %q has no fixed PCI slot", d)
			continue
		}
		bus := "pci.0"
		if _, b, ok := strings.Cut(d, ",bus="); ok {
			bus, _, _ = strings.Cut(b, ",")
		}
		key := bus + "/" + addr
		if other, dup := slots[key]; dup {
			t.Errorf("devices %q and %q share slot %s", other, d, key)
		}
		slots[key] = d
	}

	noShares, err := qemuArgs(argSpec{machine: MachineQ35}, vmm.Config{ID: "c2", Dir: dir, Kernel: "/k", Initramfs: "/i"})
	if err != nil {
		t.Fatal(err)
	}
	if got := argAfter(noShares, "-object"); len(got) != 0 {
		t.Errorf("a VM without shares got shared memory: %q", got)
	}

	for _, bad := range []vmm.Share{{Tag: "", Socket: "/s"}, {Tag: strings.Repeat("t", 37), Socket: "/s"}, {Tag: "t"}} {
		cfg.Shares = []vmm.Share{bad}
		if _, err := qemuArgs(argSpec{machine: MachineQ35}, cfg); !errdefs.IsInvalidArgument(err) {
			t.Errorf("share %+v: err %v, want invalid argument", bad, err)
		}
	}
}

// A restore boots on the CPU and firmware its snapshot's guest booted on,
// whatever the driver's are now: layouts that name none are of TCG guests
// on plain "max" and SeaBIOS.
func TestRestoreArgsFromLayout(t *testing.T) {
	cfg := vmm.Config{ID: "c1", Dir: t.TempDir(), Kernel: "/boot/vmlinuz", Initramfs: "/i.cpio"}
	cases := []struct {
		name         string
		layout       layout
		wantCPU      string
		wantFirmware []string
	}{
		{"recorded", layout{Accel: "tcg", CPU: "max,erms=off", Firmware: "qboot.rom"}, "max,erms=off", []string{"qboot.rom"}},
		{"recorded other", layout{Accel: "tcg", CPU: "qemu64"}, "qemu64", nil},
		{"before CPUs were recorded", layout{Accel: "tcg"}, "max", nil},
		{"kvm before CPUs were recorded", layout{Accel: "kvm"}, "host", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := cfg
			cfg.Accel = c.layout.Accel
			args, err := qemuArgs(argSpec{machine: MachineQ35, incoming: true, cpu: c.layout.cpu(), firmware: c.layout.Firmware}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := argAfter(args, "-cpu"); !slices.Equal(got, []string{c.wantCPU}) {
				t.Errorf("-cpu = %q, want %q", got, c.wantCPU)
			}
			if got := argAfter(args, "-bios"); !slices.Equal(got, c.wantFirmware) {
				t.Errorf("-bios = %q, want %q", got, c.wantFirmware)
			}
		})
	}
}

func TestQEMUArgsTCGBufferAndRestore(t *testing.T) {
	cfg := vmm.Config{ID: "c1", Dir: t.TempDir(), Kernel: "/boot/vmlinuz", Initramfs: "/i.cpio", Cmdline: "x=1"}
	cases := []struct {
		name         string
		spec         argSpec
		accel        string
		wantAccel    string
		wantKernel   bool
		wantIncoming bool
	}{
		{"capped buffer", argSpec{machine: MachineQ35, tbMiB: 64}, "", "tcg,tb-size=64", true, false},
		{"QEMU's buffer", argSpec{machine: MachineQ35, tbMiB: -1}, "", "tcg", true, false},
		{"kvm has no buffer", argSpec{machine: MachineQ35, tbMiB: 64}, "kvm", "kvm", true, false},
		{"restore boots no kernel", argSpec{machine: MachineQ35, tbMiB: 64, incoming: true}, "", "tcg,tb-size=64", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := cfg
			cfg.Accel = c.accel
			args, err := qemuArgs(c.spec, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := argAfter(args, "-accel"); !slices.Equal(got, []string{c.wantAccel}) {
				t.Errorf("-accel = %q, want %q", got, c.wantAccel)
			}
			for _, flag := range []string{"-kernel", "-initrd", "-append"} {
				if got := len(argAfter(args, flag)) == 1; got != c.wantKernel {
					t.Errorf("%s present = %v, want %v", flag, got, c.wantKernel)
				}
			}
			if got := argAfter(args, "-incoming"); c.wantIncoming != slices.Equal(got, []string{"defer"}) {
				t.Errorf("-incoming = %q, want it: %v", got, c.wantIncoming)
			}
		})
	}
}

func TestNewDefaultTBSize(t *testing.T) {
	for _, c := range []struct{ in, want int }{{0, DefaultTBSizeMiB}, {-1, -1}, {64, 64}} {
		if got := New(Options{TBSizeMiB: c.in}).tbMiB; got != c.want {
			t.Errorf("TBSizeMiB %d: driver uses %d, want %d", c.in, got, c.want)
		}
	}
}

// TestQEMUArgsFileMemory checks the RAM file's backend: named as the
// machine's default RAM (so streams restore into anonymous-RAM VMs),
// shared only when the VM writes through, and refused beside shares.
func TestQEMUArgsFileMemory(t *testing.T) {
	cfg := vmm.Config{ID: "m1", Dir: t.TempDir(), Kernel: "/boot/vmlinuz", Initramfs: "/initrd", MemoryMiB: 256}
	for _, tc := range []struct {
		name    string
		spec    argSpec
		object  string
		machine string
	}{
		{"template", argSpec{machine: MachineQ35, memory: memorySpec{path: "/t/a,b/memory", shared: true}},
			"memory-backend-file,id=pc.ram,size=256M,mem-path=/t/a,,b/memory,share=on", "memory-backend=pc.ram"},
		{"restore", argSpec{machine: MachineQ35, incoming: true, memory: memorySpec{path: "/t/memory"}},
			"memory-backend-file,id=pc.ram,size=256M,mem-path=/t/memory,share=off", "memory-backend=pc.ram"},
		{"microvm", argSpec{machine: MachineMicroVM, memory: memorySpec{path: "/t/memory", shared: true}},
			"memory-backend-file,id=microvm.ram,size=256M,mem-path=/t/memory,share=on", "memory-backend=microvm.ram"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, err := qemuArgs(tc.spec, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := argAfter(args, "-object"); !slices.Equal(got, []string{tc.object}) {
				t.Errorf("-object = %q, want %q", got, tc.object)
			}
			if got := argAfter(args, "-machine"); !slices.Equal(got, []string{tc.machine}) {
				t.Errorf("-machine = %q, want %q", got, tc.machine)
			}
		})
	}
	shared := cfg
	shared.Shares = []vmm.Share{{Tag: "husk0", Socket: "/s.sock"}}
	if _, err := qemuArgs(argSpec{machine: MachineQ35, memory: memorySpec{path: "/t/memory", shared: true}}, shared); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("file memory with shares: %v, want invalid argument", err)
	}
}

// TestQEMUArgsRemovable: an empty removable disk is a backend with no
// file and no fd set, read-only as its medium will be; a removable disk
// with a medium is the usual drive; both devices are removable, and the
// fd sets of the disks after an empty one keep their numbers.
func TestQEMUArgsRemovable(t *testing.T) {
	cfg := vmm.Config{ID: "c1", Dir: t.TempDir(), Kernel: "/boot/vmlinuz", Initramfs: "/i.cpio", Disks: []vmm.Disk{
		{ReadOnly: true, Serial: "husk-base", Removable: true},
		{Path: "/u.img", Serial: "husk-upper", Removable: true},
	}}
	args, err := qemuArgs(argSpec{machine: MachineQ35}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	wantDrives := []string{
		"if=none,id=disk0,readonly=on",
		"file=/dev/fdset/2,file.locking=off,if=none,format=raw,id=disk1,readonly=off",
	}
	if got := argAfter(args, "-drive"); !slices.Equal(got, wantDrives) {
		t.Errorf("-drive = %q, want %q", got, wantDrives)
	}
	if got, want := argAfter(args, "-add-fd"), []string{"fd=3,set=2", "fd=4,set=2"}; !slices.Equal(got, want) {
		t.Errorf("-add-fd = %q, want %q", got, want)
	}
	var removable int
	for _, d := range argAfter(args, "-device") {
		if strings.HasPrefix(d, "scsi-hd,") && strings.HasSuffix(d, ",removable=on") {
			removable++
		}
	}
	if removable != 2 {
		t.Errorf("%d removable SCSI disks in %q, want 2", removable, argAfter(args, "-device"))
	}
}

// TestLayoutRemovable: whether a removable disk holds a medium is not
// migrated state, which disks are removable is.
func TestLayoutRemovable(t *testing.T) {
	d := New(Options{Binary: "qemu-system-x86_64"})
	base := vmm.Config{Disks: []vmm.Disk{{Path: "/b", ReadOnly: true, Serial: "b", Removable: true}}}
	empty := vmm.Config{Disks: []vmm.Disk{{ReadOnly: true, Serial: "b", Removable: true}}}
	fixed := vmm.Config{Disks: []vmm.Disk{{Path: "/b", ReadOnly: true, Serial: "b"}}}
	inserted := d.layoutOf(base, nil)
	inserted.Disks[0].Medium = "medium0"
	if !inserted.equal(d.layoutOf(base, nil)) {
		t.Error("a medium's node name made two layouts differ")
	}
	if d.layoutOf(empty, nil).equal(d.layoutOf(base, nil)) {
		t.Error("an empty disk's layout equals a full one's")
	}
	if d.layoutOf(fixed, nil).equal(d.layoutOf(base, nil)) {
		t.Error("a fixed disk's layout equals a removable one's")
	}
}
