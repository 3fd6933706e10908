package kernel

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cavaliergopher/cpio"

	"github.com/husk-vm/husk/shim/proto"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

type cpioEntry struct {
	hdr  cpio.Header
	data []byte
}

// readArchive reads an initramfs (gzip or not) back into a map by name.
func readArchive(t *testing.T, path string) (map[string]cpioEntry, []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r io.Reader = bytes.NewReader(raw)
	if bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = gz
	}
	cr := cpio.NewReader(r)
	entries := map[string]cpioEntry{}
	var order []string
	for {
		hdr, err := cr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read cpio: %v", err)
		}
		data, err := io.ReadAll(cr)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := entries[hdr.Name]; dup {
			t.Errorf("entry %s appears twice", hdr.Name)
		}
		entries[hdr.Name] = cpioEntry{hdr: *hdr, data: data}
		order = append(order, hdr.Name)
	}
	return entries, order
}

// fakeModules makes a modules dir whose files have distinct contents,
// with virtio_net compressed with zstd and overlay with xz.
func fakeModules(t *testing.T) (Kernel, map[string][]byte) {
	t.Helper()
	dep := strings.ReplaceAll(testDep, "overlay.ko:", "overlay.ko.xz:")
	dir := writeModulesDir(t, dep, "")
	contents := map[string][]byte{}
	for _, line := range strings.Split(strings.TrimSpace(dep), "\n") {
		rel, _, _ := strings.Cut(line, ":")
		name := moduleName(rel)
		plain := []byte("\x7fELF fake module " + name + strings.Repeat(" pad", 100))
		contents[name] = plain
		stored := plain
		switch {
		case strings.HasSuffix(rel, ".zst"):
			enc, err := zstd.NewWriter(nil)
			if err != nil {
				t.Fatal(err)
			}
			stored = enc.EncodeAll(plain, nil)
			enc.Close()
		case strings.HasSuffix(rel, ".xz"):
			var buf bytes.Buffer
			w, err := xz.NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(plain)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			stored = buf.Bytes()
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, stored, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Kernel{ModulesDir: dir, Version: "test"}, contents
}

func TestInitramfsContent(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "gzip"}[compress], func(t *testing.T) {
			k, contents := fakeModules(t)
			agent := filepath.Join(t.TempDir(), "agent")
			agentBytes := []byte("#!agent binary")
			if err := os.WriteFile(agent, agentBytes, 0o755); err != nil {
				t.Fatal(err)
			}
			installed := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
			if err := os.Chtimes(agent, installed, installed); err != nil {
				t.Fatal(err)
			}
			mods, err := GuestModules(k)
			if err != nil {
				t.Fatal(err)
			}
			path, err := buildInitramfs(context.Background(), guestBinaries{agent: agent}, mods, t.TempDir(), compress)
			if err != nil {
				t.Fatal(err)
			}
			entries, order := readArchive(t, path)
			// Built again elsewhere from the same files, the archive is
			// the same to the byte: its digest is what checkpoints and
			// templates are checked against.
			again, err := buildInitramfs(context.Background(), guestBinaries{agent: agent}, mods, t.TempDir(), compress)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := readFile(t, path), readFile(t, again); !bytes.Equal(a, b) {
				t.Error("two builds of the same files differ")
			}

			init, ok := entries["init"]
			if !ok {
				t.Fatal("no /init")
			}
			if !bytes.Equal(init.data, agentBytes) || init.hdr.Mode != cpio.TypeReg|0o755 {
				t.Errorf("/init: mode %o, %d bytes; want the agent, mode 100755", init.hdr.Mode, len(init.data))
			}
			for _, d := range []string{"dev", "proc", "sys", "run", "tmp", "etc", "husk/modules"} {
				if e, ok := entries[d]; !ok || !e.hdr.Mode.IsDir() {
					t.Errorf("directory /%s missing", d)
				}
			}
			for _, n := range []string{"dev/console", "dev/null"} {
				if e, ok := entries[n]; !ok || e.hdr.Mode&cpio.ModeType != cpio.TypeChar {
					t.Errorf("%s missing or not a character device", n)
				}
			}
			// The reader does not expose device numbers: check the raw
			// newc header of dev/console says 5:1.
			raw, _ := os.ReadFile(path)
			if compress {
				gz, _ := gzip.NewReader(bytes.NewReader(raw))
				raw, _ = io.ReadAll(gz)
			}
			if i := bytes.Index(raw, []byte("dev/console\x00")); i < 110 || string(raw[i-110+78:i-110+94]) != "0000000500000001" {
				t.Errorf("dev/console header does not carry device 5:1")
			}
			// The init layer, each entry after its parent, and the
			// lost+found whiteout (0:0, which the writer always records).
			layer := strings.TrimPrefix(proto.InitLayerDir, "/")
			seen := map[string]int{}
			for i, n := range order {
				seen[n] = i
			}
			for _, e := range proto.InitLayer() {
				name := layer + "/" + e.Path
				if e.Under {
					name = strings.TrimPrefix(proto.InitLayerUnderDir, "/") + "/" + e.Path
				}
				got, ok := entries[name]
				if !ok {
					t.Errorf("init layer entry %s missing", name)
					continue
				}
				if seen[filepath.Dir(name)] > seen[name] {
					t.Errorf("%s comes before its directory", name)
				}
				want := map[proto.InitLayerKind]cpio.FileMode{
					proto.InitLayerDirectory: cpio.TypeDir | 0o755,
					proto.InitLayerFile:      cpio.TypeReg | 0o755,
					proto.InitLayerSymlink:   cpio.TypeSymlink | 0o777,
				}[e.Kind]
				if got.hdr.Mode != want || got.hdr.Uid != 0 || got.hdr.Guid != 0 {
					t.Errorf("%s: mode %o owner %d:%d, want %o root's", name, got.hdr.Mode, got.hdr.Uid, got.hdr.Guid, want)
				}
				if !got.hdr.ModTime.Equal(installed) {
					t.Errorf("%s dated %v, want the agent's %v", name, got.hdr.ModTime, installed)
				}
				if e.Kind == proto.InitLayerSymlink && got.hdr.Linkname != e.Target {
					t.Errorf("%s -> %q, want %q", name, got.hdr.Linkname, e.Target)
				}
			}
			whiteout := strings.TrimPrefix(proto.HideLostFoundDir, "/") + "/lost+found"
			if e, ok := entries[whiteout]; !ok || e.hdr.Mode&cpio.ModeType != cpio.TypeChar {
				t.Errorf("%s missing or not a character device", whiteout)
			}
			if order[0] != "dev" {
				t.Errorf("first entry %s, want dev (device nodes need it)", order[0])
			}

			lines := strings.Split(strings.TrimSuffix(string(entries["husk/modules.order"].data), "\n"), "\n")
			if len(lines) != len(mods) {
				t.Fatalf("modules.order has %d lines, want %d", len(lines), len(mods))
			}
			for i, line := range lines {
				want := "/husk/modules/" + mods[i].Name + ".ko"
				if line != want {
					t.Errorf("modules.order line %d = %q, want %q", i, line, want)
				}
				e, ok := entries[strings.TrimPrefix(line, "/")]
				if !ok {
					t.Errorf("%s listed but not in the archive", line)
					continue
				}
				if !bytes.Equal(e.data, contents[mods[i].Name]) {
					t.Errorf("%s content differs from the (decompressed) module", line)
				}
			}
		})
	}
}

func TestInitramfsCache(t *testing.T) {
	ctx := context.Background()
	k, _ := fakeModules(t)
	cache := t.TempDir()
	agent := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(agent, []byte("agent v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	first, err := BuildInitramfs(ctx, k, agent, "", cache)
	if err != nil {
		t.Fatal(err)
	}
	st1, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}

	again, err := BuildInitramfs(ctx, k, agent, "", cache)
	if err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(again)
	if err != nil {
		t.Fatal(err)
	}
	if again != first || !os.SameFile(st1, st2) {
		t.Fatalf("same inputs rebuilt: %s then %s", first, again)
	}

	// Same bytes at another path: still a hit.
	agentCopy := filepath.Join(t.TempDir(), "other-agent")
	if err := os.WriteFile(agentCopy, []byte("agent v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := BuildInitramfs(ctx, k, agentCopy, "", cache); err != nil || p != first {
		t.Fatalf("same agent bytes elsewhere: %s, %v; want %s", p, err, first)
	}

	if err := os.WriteFile(agent, []byte("agent v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	second, err := BuildInitramfs(ctx, k, agent, "", cache)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("new agent bytes gave the cached initramfs")
	}

	// The C init is part of the archive and of its key.
	cinit := filepath.Join(t.TempDir(), "husk-init")
	if err := os.WriteFile(cinit, []byte("init v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	withInit, err := BuildInitramfs(ctx, k, agent, cinit, cache)
	if err != nil {
		t.Fatal(err)
	}
	if withInit == second {
		t.Fatal("adding the container init gave the cached initramfs")
	}
	entries, _ := readArchive(t, withInit)
	if e := entries[strings.TrimPrefix(proto.ContainerInitPath, "/")]; string(e.data) != "init v1" || e.hdr.Mode.Perm() != 0o755 {
		t.Errorf("container init in the archive: %q mode %v", e.data, e.hdr.Mode)
	}
	if err := os.WriteFile(cinit, []byte("init v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := BuildInitramfs(ctx, k, agent, cinit, cache); err != nil || p == withInit {
		t.Fatalf("new container init bytes: %s, %v; want a new archive", p, err)
	}

	mod := filepath.Join(k.ModulesDir, "kernel/drivers/block/virtio_blk.ko")
	if err := os.WriteFile(mod, []byte("rebuilt module"), 0o644); err != nil {
		t.Fatal(err)
	}
	third, err := BuildInitramfs(ctx, k, agent, "", cache)
	if err != nil {
		t.Fatal(err)
	}
	if third == second || third == first {
		t.Fatal("changed module gave a cached initramfs")
	}
	entries, _ = readArchive(t, third)
	if string(entries["husk/modules/virtio_blk.ko"].data) != "rebuilt module" {
		t.Error("rebuilt initramfs does not hold the changed module")
	}

	// No temp files are left behind.
	leftovers, _ := filepath.Glob(filepath.Join(cache, ".initramfs-*"))
	if len(leftovers) != 0 {
		t.Errorf("temp files left in cache: %v", leftovers)
	}

	// A pruned cache holds the kept archive alone; other files stay.
	other := filepath.Join(cache, "vmlinux-0123")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := PruneInitramfs(cache, third); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{first, second} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s outlived the prune (%v)", p, err)
		}
	}
	for _, p := range []string{third, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("pruned what it was to keep: %v", err)
		}
	}
}

func TestInitramfsMissingAgent(t *testing.T) {
	k, _ := fakeModules(t)
	cache := t.TempDir()
	if _, err := BuildInitramfs(context.Background(), k, filepath.Join(cache, "nope"), "", cache); err == nil {
		t.Fatal("built an initramfs without an agent")
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("cache not empty after failure: %v", ents)
	}
}

// TestInitramfsHostKernel builds against the installed kernel and checks
// every resolved module made it in.
func TestInitramfsHostKernel(t *testing.T) {
	k := hostKernel(t)
	agent := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(agent, []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	path, err := BuildInitramfs(context.Background(), k, agent, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := readArchive(t, path)
	mods, _ := GuestModules(k)
	for _, m := range mods {
		e, ok := entries["husk/modules/"+m.Name+".ko"]
		if !ok {
			t.Errorf("module %s missing", m.Name)
			continue
		}
		if !bytes.HasPrefix(e.data, []byte("\x7fELF")) {
			t.Errorf("module %s is not an ELF object", m.Name)
		}
		if bytes.HasSuffix(e.data, []byte(moduleSigMagic)) {
			t.Errorf("module %s still carries its signature", m.Name)
		}
	}
}

func TestStripModuleSignature(t *testing.T) {
	module := []byte("\x7fELF module code")
	signed := func(sig []byte, sigLen uint32) []byte {
		b := append(bytes.Clone(module), sig...)
		info := make([]byte, 12)
		binary.BigEndian.PutUint32(info[8:], sigLen)
		return append(append(b, info...), moduleSigMagic...)
	}
	cases := []struct {
		name string
		in   []byte
		want []byte
	}{
		{"signed", signed([]byte("PKCS#7 signature"), 16), module},
		{"unsigned", module, module},
		{"signature longer than the file", signed([]byte("sig"), 1<<20), signed([]byte("sig"), 1<<20)},
		{"only the magic", []byte(moduleSigMagic), []byte(moduleSigMagic)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := stripModuleSignature(c.in); !bytes.Equal(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
