package kernel

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeModulesDir creates a modules directory with the given modules.dep
// and modules.builtin contents and an empty file for each module listed.
func writeModulesDir(t *testing.T, dep, builtin string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	if builtin != "" {
		if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte(builtin), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Modelled on Debian 6.1's real modules.dep, plus a compressed module and
// a dash-named one.
const testDep = `kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/scsi/scsi_mod.ko: kernel/drivers/scsi/scsi_common.ko
kernel/drivers/scsi/scsi_common.ko:
kernel/drivers/scsi/virtio_scsi.ko: kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/scsi/sd_mod.ko: kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko
kernel/drivers/char/virtio_console.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/virtio_net.ko.zst: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/fs/overlayfs/overlay.ko:
kernel/net/vmw_vsock/vsock.ko:
kernel/net/vmw_vsock/vmw_vsock_virtio_transport_common.ko: kernel/net/vmw_vsock/vsock.ko
kernel/net/vmw_vsock/vmw_vsock_virtio_transport.ko: kernel/net/vmw_vsock/vmw_vsock_virtio_transport_common.ko kernel/net/vmw_vsock/vsock.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/fs/fuse/fuse.ko:
kernel/fs/fuse/virtiofs.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko kernel/fs/fuse/fuse.ko
`

func names(mods []Module) []string {
	var out []string
	for _, m := range mods {
		out = append(out, m.Name)
	}
	return out
}

// checkOrder fails unless every module comes after each of its deps.
func checkOrder(t *testing.T, db *moduleDB, mods []Module) {
	t.Helper()
	pos := map[string]int{}
	for i, m := range mods {
		if _, dup := pos[m.Name]; dup {
			t.Errorf("module %s listed twice", m.Name)
		}
		pos[m.Name] = i
	}
	for i, m := range mods {
		for _, d := range db.deps[m.Name].deps {
			dn := moduleName(d)
			if db.builtin[dn] {
				continue
			}
			j, ok := pos[dn]
			if !ok {
				t.Errorf("%s needs %s, which is missing", m.Name, dn)
			} else if j > i {
				t.Errorf("%s (at %d) comes before its dependency %s (at %d)", m.Name, i, dn, j)
			}
		}
	}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name    string
		dep     string
		builtin string
		want    []string
		wantErr string
	}{
		{
			name: "all modules",
			dep:  testDep,
			want: []string{
				"virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_ring", "virtio", "virtio_pci",
				"virtio_mmio", "virtio_blk", "scsi_common", "scsi_mod", "virtio_scsi", "sd_mod", "virtio_console", "failover", "net_failover", "virtio_net", "overlay",
				"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport", "virtio_rng",
				"fuse", "virtiofs",
			},
		},
		{
			name:    "virtio core built in",
			dep:     testDep,
			builtin: "kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_ring.ko\nkernel/drivers/virtio/virtio_pci.ko\nkernel/fs/overlayfs/overlay.ko\n",
			want: []string{
				"virtio_mmio", "virtio_blk", "scsi_common", "scsi_mod", "virtio_scsi", "sd_mod", "virtio_console", "failover", "net_failover", "virtio_net",
				"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport", "virtio_rng",
				"fuse", "virtiofs",
			},
		},
		{
			name: "optional rng absent",
			dep:  strings.ReplaceAll(testDep, "kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n", ""),
			want: []string{
				"virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_ring", "virtio", "virtio_pci",
				"virtio_mmio", "virtio_blk", "scsi_common", "scsi_mod", "virtio_scsi", "sd_mod", "virtio_console", "failover", "net_failover", "virtio_net", "overlay",
				"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport", "fuse", "virtiofs",
			},
		},
		{
			name: "optional vsock absent",
			dep: strings.NewReplacer(
				"kernel/net/vmw_vsock/vsock.ko:\n", "",
				"kernel/net/vmw_vsock/vmw_vsock_virtio_transport_common.ko: kernel/net/vmw_vsock/vsock.ko\n", "",
				"kernel/net/vmw_vsock/vmw_vsock_virtio_transport.ko: kernel/net/vmw_vsock/vmw_vsock_virtio_transport_common.ko kernel/net/vmw_vsock/vsock.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n", "",
			).Replace(testDep),
			want: []string{
				"virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_ring", "virtio", "virtio_pci",
				"virtio_mmio", "virtio_blk", "scsi_common", "scsi_mod", "virtio_scsi", "sd_mod", "virtio_console", "failover", "net_failover", "virtio_net", "overlay",
				"virtio_rng", "fuse", "virtiofs",
			},
		},
		{
			name:    "required module missing",
			dep:     strings.ReplaceAll(testDep, "kernel/fs/overlayfs/overlay.ko:\n", ""),
			wantErr: "module overlay not in",
		},
		{
			name:    "dependency missing",
			dep:     strings.ReplaceAll(testDep, "kernel/net/core/failover.ko:\n", ""),
			wantErr: "module failover not in",
		},
		{
			name:    "cycle",
			dep:     testDep + "kernel/drivers/virtio/virtio_ring.ko: kernel/drivers/virtio/virtio.ko\n",
			wantErr: "dependency cycle",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeModulesDir(t, tt.dep, tt.builtin)
			mods, err := GuestModules(Kernel{ModulesDir: dir})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(mods); !slices.Equal(got, tt.want) {
				t.Fatalf("modules =\n%v\nwant\n%v", got, tt.want)
			}
			db, err := loadModuleDB(dir)
			if err != nil {
				t.Fatal(err)
			}
			checkOrder(t, db, mods)
			for _, m := range mods {
				if !filepath.IsAbs(m.Path) || !strings.HasPrefix(m.Path, dir) {
					t.Errorf("module %s path %s not absolute under %s", m.Name, m.Path, dir)
				}
			}
		})
	}
}

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/drivers/char/hw_random/virtio-rng.ko": "virtio_rng",
		"kernel/drivers/net/virtio_net.ko.zst":        "virtio_net",
		"kernel/fs/overlayfs/overlay.ko.xz":           "overlay",
		"virtio_pci":                                  "virtio_pci",
	} {
		if got := moduleName(in); got != want {
			t.Errorf("moduleName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestGuestModulesHost resolves against the installed kernel: every
// module file must exist and the order must respect modules.dep.
func TestGuestModulesHost(t *testing.T) {
	k := hostKernel(t)
	mods, err := GuestModules(k)
	if err != nil {
		t.Fatal(err)
	}
	db, err := loadModuleDB(k.ModulesDir)
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, db, mods)
	have := map[string]bool{}
	for _, m := range mods {
		have[m.Name] = true
		if _, err := os.Stat(m.Path); err != nil {
			t.Errorf("module %s: %v", m.Name, err)
		}
	}
	for _, w := range guestModules() {
		if !have[w.name] && !db.builtin[w.name] && !w.optional {
			t.Errorf("required module %s neither resolved nor built in", w.name)
		}
	}
	t.Logf("%d modules: %v", len(mods), names(mods))
}
