package kernel

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cavaliergopher/cpio"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/husk-vm/husk/shim/proto"
)

// Layout of the initramfs, shared with the agent (cmd/husk-agent).
const (
	// InitPath is the agent binary; the kernel runs it as PID 1.
	InitPath = "/init"
	// ModulesPath holds <name>.ko, always uncompressed.
	ModulesPath = "/husk/modules"
	// ModulesOrderPath lists one absolute module path per line in load
	// order, dependencies first.
	ModulesOrderPath = "/husk/modules.order"
)

// The initramfs is stored uncompressed. Measured under QEMU TCG on the
// project's 2-core machine (Debian 6.1 cloud kernel, a 2.7 MB Go init plus
// the modules: 4.0 MB plain, 2.0 MB gzipped), boot to the init answering
// took a median 2.15 s plain against 2.27 s gzipped: the kernel's in-guest
// gunzip runs emulated and costs more than QEMU copying twice the bytes
// from the host page cache. A plain cpio is also cheaper to build.
const compressInitramfs = false

// cacheFormat is bumped whenever the archive layout changes, so stale
// cached files are never reused. 2: modules without their signatures.
// 3: the init layer.
const cacheFormat = "husk-initramfs-3"

// BuildInitramfs returns the path of an initramfs for k with the agent at
// agentPath as /init, the C init at initPath (none when "") as
// proto.ContainerInitPath, and GuestModules(k) under /husk/modules.
// Results are cached in cacheDir by content: the same agent and init bytes
// and the same module files give the same file, which is built only when
// any changes.
// Files of older builds are left in cacheDir; PruneInitramfs removes
// them.
func BuildInitramfs(ctx context.Context, k Kernel, agentPath, initPath, cacheDir string) (string, error) {
	mods, err := GuestModules(k)
	if err != nil {
		return "", err
	}
	return buildInitramfs(ctx, guestBinaries{agentPath, initPath}, mods, cacheDir, compressInitramfs)
}

// guestBinaries are the initramfs's programs: the agent, and the C init
// ("" for none).
type guestBinaries struct {
	agent, init string
}

// PruneInitramfs removes from cacheDir every archive BuildInitramfs wrote
// except those in keep. Each build of the agent gives a new archive, and
// an old one is no use: a guest reads its initramfs only while it boots,
// and checkpoints and templates of another initramfs are refused.
func PruneInitramfs(cacheDir string, keep ...string) error {
	names := map[string]bool{}
	for _, k := range keep {
		names[filepath.Base(k)] = true
	}
	if err := pruneCache(cacheDir, names, "initramfs-*.cpio", "initramfs-*.cpio.gz"); err != nil {
		return fmt.Errorf("prune initramfs archives: %w", err)
	}
	return nil
}

func buildInitramfs(ctx context.Context, bins guestBinaries, mods []Module, cacheDir string, compress bool) (string, error) {
	key, err := initramfsKey(ctx, bins, mods, compress)
	if err != nil {
		return "", err
	}
	name := "initramfs-" + key + ".cpio"
	if compress {
		name += ".gz"
	}
	dst := filepath.Join(cacheDir, name)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	err = installCacheFile(cacheDir, dst, ".initramfs-*.tmp", func(f *os.File) error {
		return writeInitramfs(ctx, f, bins, mods, compress)
	})
	if err != nil {
		return "", fmt.Errorf("write initramfs: %w", err)
	}
	return dst, nil
}

// installCacheFile writes dst in cacheDir (created if missing) through
// write, atomically: a temporary file, synced, made world-readable (VMMs
// run as another user) and renamed into place.
func installCacheFile(cacheDir, dst, pattern string, write func(*os.File) error) error {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", cacheDir, err)
	}
	tmp, err := os.CreateTemp(cacheDir, pattern)
	if err != nil {
		return err
	}
	// Removing after a successful rename fails harmlessly.
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	return syncDir(cacheDir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s for sync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// initramfsKey hashes everything the archive is made of.
func initramfsKey(ctx context.Context, bins guestBinaries, mods []Module, compress bool) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s compress=%t\n", cacheFormat, compress)
	if err := hashFile(h, bins.agent); err != nil {
		return "", fmt.Errorf("hash agent: %w", err)
	}
	if bins.init != "" {
		fmt.Fprintf(h, "\ncontainer init\n")
		if err := hashFile(h, bins.init); err != nil {
			return "", fmt.Errorf("hash container init: %w", err)
		}
	}
	for _, m := range mods {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		fmt.Fprintf(h, "\nmodule %s %s\n", m.Name, filepath.Base(m.Path))
		if err := hashFile(h, m.Path); err != nil {
			return "", fmt.Errorf("hash module %s: %w", m.Name, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

func hashFile(h hash.Hash, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(h, f)
	fmt.Fprintf(h, "\nsize %d\n", n)
	return err
}

func writeInitramfs(ctx context.Context, out io.Writer, bins guestBinaries, mods []Module, compress bool) error {
	bw := bufio.NewWriterSize(out, 1<<20)
	w := io.Writer(bw)
	var gz *gzip.Writer
	if compress {
		gz = gzip.NewWriter(bw)
		w = gz
	}
	if err := writeDeviceNodes(w); err != nil {
		return err
	}
	cw := cpio.NewWriter(w)
	// These exist so the agent can mount onto them without creating
	// anything first; /dev comes with the device nodes.
	for _, d := range []string{"proc", "sys", "run", "tmp", "etc", "husk", "husk/modules"} {
		if err := cw.WriteHeader(&cpio.Header{Name: d, Mode: cpio.TypeDir | 0o755, Links: 2}); err != nil {
			return fmt.Errorf("add %s: %w", d, err)
		}
	}
	if err := addFile(cw, strings.TrimPrefix(InitPath, "/"), bins.agent, 0o755); err != nil {
		return fmt.Errorf("add agent: %w", err)
	}
	if bins.init != "" {
		if err := addFile(cw, strings.TrimPrefix(proto.ContainerInitPath, "/"), bins.init, 0o755); err != nil {
			return fmt.Errorf("add container init: %w", err)
		}
	}
	agent, err := os.Stat(bins.agent)
	if err != nil {
		return fmt.Errorf("add init layer: %w", err)
	}
	if err := addInitLayer(cw, agent.ModTime()); err != nil {
		return err
	}
	var order strings.Builder
	for _, m := range mods {
		if err := ctx.Err(); err != nil {
			return err
		}
		dst := ModulesPath + "/" + m.Name + ".ko"
		if err := addModule(cw, strings.TrimPrefix(dst, "/"), m.Path); err != nil {
			return fmt.Errorf("add module %s: %w", m.Name, err)
		}
		order.WriteString(dst + "\n")
	}
	hdr := &cpio.Header{Name: strings.TrimPrefix(ModulesOrderPath, "/"), Mode: cpio.TypeReg | 0o644, Size: int64(order.Len())}
	if err := cw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("add modules.order: %w", err)
	}
	if _, err := io.WriteString(cw, order.String()); err != nil {
		return fmt.Errorf("add modules.order: %w", err)
	}
	if err := cw.Close(); err != nil {
		return fmt.Errorf("finish cpio: %w", err)
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return fmt.Errorf("finish gzip: %w", err)
		}
	}
	return bw.Flush()
}

// addInitLayer adds the init layer and the lost+found whiteout the agent
// stacks into every container's overlay (proto.InitLayerDir), owned by
// root like every entry. A container shows their times on its /etc and
// /.dockerenv, which dockerd dates when it makes a container's init
// layer. They are dated as the agent binary, its install, and not as
// the archive's build: checkpoints and templates record the archive's
// digest, and an archive built again for the same agent (after a prune,
// or a lost cache) must have the same one, or they are all refused.
func addInitLayer(cw *cpio.Writer, dated time.Time) error {
	layer := strings.TrimPrefix(proto.InitLayerDir, "/")
	under := strings.TrimPrefix(proto.InitLayerUnderDir, "/")
	hide := strings.TrimPrefix(proto.HideLostFoundDir, "/")
	// data is a symlink's target.
	add := func(name string, mode cpio.FileMode, data string) error {
		h := &cpio.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: dated}
		if mode&^cpio.ModePerm == cpio.TypeDir {
			h.Links = 2
		}
		if err := cw.WriteHeader(h); err != nil {
			return fmt.Errorf("add %s: %w", name, err)
		}
		if _, err := io.WriteString(cw, data); err != nil {
			return fmt.Errorf("add %s: %w", name, err)
		}
		return nil
	}
	for _, dir := range []string{layer, under} {
		if err := add(dir, cpio.TypeDir|0o755, ""); err != nil {
			return err
		}
	}
	for _, e := range proto.InitLayer() {
		dir := layer
		if e.Under {
			dir = under
		}
		var err error
		switch name := dir + "/" + e.Path; e.Kind {
		case proto.InitLayerDirectory:
			err = add(name, cpio.TypeDir|0o755, "")
		case proto.InitLayerFile:
			err = add(name, cpio.TypeReg|0o755, "")
		case proto.InitLayerSymlink:
			err = add(name, cpio.TypeSymlink|0o777, e.Target)
		default:
			err = fmt.Errorf("add init layer: %s: unknown kind %d", e.Path, e.Kind)
		}
		if err != nil {
			return err
		}
	}
	if err := add(hide, cpio.TypeDir|0o755, ""); err != nil {
		return err
	}
	// A 0:0 character device is overlayfs's whiteout; cpio.Writer writes
	// every device number as 0.
	return add(hide+"/lost+found", cpio.TypeChar, "")
}

func addFile(cw *cpio.Writer, name, src string, perm cpio.FileMode) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	if err := cw.WriteHeader(&cpio.Header{Name: name, Mode: cpio.TypeReg | perm, Size: st.Size()}); err != nil {
		return err
	}
	if _, err := io.Copy(cw, f); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// addModule stores a module uncompressed, whatever the distribution ships,
// so the agent can hand the file straight to finit_module, and without
// its signature (stripModuleSignature).
func addModule(cw *cpio.Writer, name, src string) error {
	// The header needs the size up front, so the module goes through
	// memory; modules are at most a few MB.
	var data []byte
	var err error
	if strings.HasSuffix(src, ".ko") {
		data, err = os.ReadFile(src)
	} else {
		data, err = decompressModule(src)
	}
	if err != nil {
		return err
	}
	data = stripModuleSignature(data)
	if err := cw.WriteHeader(&cpio.Header{Name: name, Mode: cpio.TypeReg | 0o644, Size: int64(len(data))}); err != nil {
		return err
	}
	_, err = cw.Write(data)
	return err
}

// moduleSigMagic ends a signed module, after a 12-byte struct
// module_signature whose last field is the big-endian length of the
// signature before it.
const moduleSigMagic = "~Module signature appended~\n"

// stripModuleSignature drops a module's appended signature. A kernel
// built with CONFIG_MODULE_SIG (Debian's) checks every signed module it
// loads: a SHA-256 over the module and an RSA verification, which under
// TCG run emulated and cost a cold boot ~0.25 s for the ~20 modules the
// guest loads (raw boot to agent-ready 1.98 s signed, 1.72 s unsigned,
// issue 8). The check protects nothing here: the modules come from the
// host that also supplies the kernel, and Debian's kernels do not enforce
// signatures, so a module a privileged container loads is not checked for
// one either. The guest kernel marks itself tainted ('E') once, on the
// first unsigned module.
func stripModuleSignature(b []byte) []byte {
	const infoLen = 12
	if !bytes.HasSuffix(b, []byte(moduleSigMagic)) || len(b) < len(moduleSigMagic)+infoLen {
		return b
	}
	info := b[len(b)-len(moduleSigMagic)-infoLen : len(b)-len(moduleSigMagic)]
	sigLen := int(binary.BigEndian.Uint32(info[8:]))
	end := len(b) - len(moduleSigMagic) - infoLen - sigLen
	if end <= 0 {
		return b
	}
	return b[:end]
}

func decompressModule(src string) ([]byte, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader
	switch {
	case strings.HasSuffix(src, ".ko.xz"):
		xr, err := xz.NewReader(bufio.NewReader(f))
		if err != nil {
			return nil, fmt.Errorf("xz %s: %w", src, err)
		}
		r = xr
	case strings.HasSuffix(src, ".ko.zst"):
		zr, err := zstd.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("zstd %s: %w", src, err)
		}
		defer zr.Close()
		r = zr
	case strings.HasSuffix(src, ".ko.gz"):
		gr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("gzip %s: %w", src, err)
		}
		r = gr
	default:
		return nil, fmt.Errorf("unknown module compression: %s", src)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("decompress %s: %w", src, err)
	}
	return data, nil
}

// deviceNode is a character device the kernel needs before any devtmpfs is
// mounted.
type deviceNode struct {
	name         string
	major, minor int64
	perm         int64
}

// writeDeviceNodes writes dev/console and dev/null as the first newc
// entries. The kernel opens /dev/console for PID 1's stdin/stdout/stderr;
// without it a Go init starts with fds 0-2 closed and the runtime aborts
// because it cannot open /dev/null either. cavaliergopher/cpio cannot
// record a device number (rdevmajor/rdevminor are always written as zero),
// so these few headers are written here by hand, in the same newc format.
func writeDeviceNodes(w io.Writer) error {
	nodes := []deviceNode{
		{name: "dev", perm: 0o755},
		{name: "dev/console", major: 5, minor: 1, perm: 0o600},
		{name: "dev/null", major: 1, minor: 3, perm: 0o666},
	}
	for i, n := range nodes {
		mode := int64(0o020000) | n.perm // S_IFCHR
		if n.name == "dev" {
			mode = int64(0o040000) | n.perm // S_IFDIR
		}
		// Inode numbers far above the ones cpio.Writer hands out (1, 2, ...)
		// so no entry looks like a hard link of another.
		fields := []int64{1<<31 + int64(i), mode, 0, 0, 1, 0, 0, 0, 0, n.major, n.minor, int64(len(n.name) + 1), 0}
		var b strings.Builder
		b.WriteString("070701")
		for _, f := range fields {
			fmt.Fprintf(&b, "%08X", f)
		}
		b.WriteString(n.name)
		b.WriteByte(0)
		for b.Len()%4 != 0 {
			b.WriteByte(0)
		}
		if _, err := io.WriteString(w, b.String()); err != nil {
			return fmt.Errorf("add %s: %w", n.name, err)
		}
	}
	return nil
}
