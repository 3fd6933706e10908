package kernel

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Module is one loadable kernel module on the host.
type Module struct {
	// Name is the module name with '-' folded to '_' (what lsmod shows).
	Name string
	// Path is the .ko, .ko.xz or .ko.zst file.
	Path string
}

// wantedModule is a module the guest asks for by name.
type wantedModule struct {
	name string
	// optional modules are skipped when the kernel does not have them.
	optional bool
}

// guestModules is what the agent needs: virtio-pci for every device on
// QEMU's Q35 machine and cloud-hypervisor, virtio-mmio for QEMU's microvm
// machine, the block disks (virtio-scsi and its disk driver on QEMU's Q35
// machine, which hot-plugs disks without ACPI; virtio-blk elsewhere), the
// virtio-serial agent port, the
// network, overlayfs for base+upper, vsock for cloud-hypervisor's agent
// channel (vsock and vmw_vsock_virtio_transport_common come along as its
// dependencies; a kernel without it still serves QEMU's virtio-serial
// port), virtio-rng so early getrandom() does not block, and virtiofs for
// volumes (optional: a kernel without it boots, but cannot mount volumes).
func guestModules() []wantedModule {
	return []wantedModule{
		{name: "virtio_pci"},
		{name: "virtio_mmio", optional: true},
		{name: "virtio_blk"},
		{name: "virtio_scsi"},
		{name: "sd_mod"},
		{name: "virtio_console"},
		{name: "virtio_net"},
		{name: "overlay"},
		{name: "vmw_vsock_virtio_transport", optional: true},
		{name: "virtio_rng", optional: true},
		{name: "virtiofs", optional: true},
	}
}

// GuestModules resolves the modules the guest needs against k: each comes
// after its dependencies, modules built into the kernel are left out, and
// each module appears once.
func GuestModules(k Kernel) ([]Module, error) {
	if k.ModulesDir == "" {
		return nil, nil // monolithic: everything is built in
	}
	db, err := loadModuleDB(k.ModulesDir)
	if err != nil {
		return nil, err
	}
	return db.resolve(guestModules())
}

// moduleName turns a module file path into its canonical name.
func moduleName(path string) string {
	base := filepath.Base(path)
	for _, ext := range []string{".ko.xz", ".ko.zst", ".ko.gz", ".ko"} {
		if strings.HasSuffix(base, ext) {
			base = strings.TrimSuffix(base, ext)
			break
		}
	}
	return strings.ReplaceAll(base, "-", "_")
}

// moduleDB is what modules.dep and modules.builtin say about one kernel.
type moduleDB struct {
	dir string
	// deps maps a module name to its file (relative to dir, as in
	// modules.dep) and the files it depends on.
	deps    map[string]depEntry
	builtin map[string]bool
}

type depEntry struct {
	path string
	deps []string
}

func loadModuleDB(dir string) (*moduleDB, error) {
	db := &moduleDB{dir: dir, deps: map[string]depEntry{}, builtin: map[string]bool{}}
	err := readLines(filepath.Join(dir, "modules.dep"), func(line string) error {
		mod, deps, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("malformed line %q", line)
		}
		mod = strings.TrimSpace(mod)
		db.deps[moduleName(mod)] = depEntry{path: mod, deps: strings.Fields(deps)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// modules.builtin is absent on kernels with no built-in modules
	// configured as such; that simply means nothing is built in.
	err = readLines(filepath.Join(dir, "modules.builtin"), func(line string) error {
		db.builtin[moduleName(line)] = true
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return db, nil
}

// readLines calls fn for each non-empty, non-comment line of path.
func readLines(path string, fn func(string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// resolve lists the wanted modules and their dependencies in load order.
// modules.dep already lists a module's full transitive closure, but its
// order is only a hint, so the order here comes from a depth-first walk
// that places every module after everything it depends on.
func (db *moduleDB) resolve(wanted []wantedModule) ([]Module, error) {
	var out []Module
	done := map[string]bool{}
	onPath := map[string]bool{}
	var visit func(name string) error
	visit = func(name string) error {
		if done[name] {
			return nil
		}
		if onPath[name] {
			return fmt.Errorf("dependency cycle through module %s", name)
		}
		e, ok := db.deps[name]
		if !ok {
			return fmt.Errorf("module %s not in %s/modules.dep", name, db.dir)
		}
		onPath[name] = true
		for _, d := range e.deps {
			dn := moduleName(d)
			if db.builtin[dn] {
				continue
			}
			if err := visit(dn); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		delete(onPath, name)
		done[name] = true
		p := e.path
		if !filepath.IsAbs(p) {
			p = filepath.Join(db.dir, p)
		}
		out = append(out, Module{Name: name, Path: p})
		return nil
	}
	for _, w := range wanted {
		name := moduleName(w.name)
		if db.builtin[name] {
			continue
		}
		if _, ok := db.deps[name]; !ok && w.optional {
			continue
		}
		if err := visit(name); err != nil {
			return nil, fmt.Errorf("resolve kernel modules: %w", err)
		}
	}
	return out, nil
}
