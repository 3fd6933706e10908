package kernel

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"
)

// A bzImage is a small real-mode setup program and a decompressor wrapped
// around the compressed kernel ELF. QEMU boots that ELF directly when it
// carries a PVH entry point (a Xen PHYS32_ENTRY note): no setup code, no
// decompression, no relocation. Under TCG those run emulated, and on the
// project's 2-core machine skipping them brought a raw boot of Debian's
// cloud kernel to agent-ready from ~2.4 to ~2.05 s (issue 8). The cost is
// the guest kernel's KASLR, which only its decompressor applies; the
// guest is the sandbox, and cloud-hypervisor and Firecracker boot their
// kernels the same way.

// ErrNoPVH says a kernel image cannot be booted through a PVH entry point:
// its compression is not one ExtractPVH reads, or its ELF has no entry.
var ErrNoPVH = errors.New("no PVH entry point")

// More offsets in the boot protocol header, from protocol 2.08 on.
const (
	offSetupSects    = 0x1f1 // 512-byte sectors of setup code after the boot sector; 0 means 4
	offPayloadOffset = 0x248 // compressed kernel, from the start of the protected-mode code
	offPayloadLength = 0x24c
)

// maxVmlinux bounds what ExtractPVH decompresses: kernels are tens of MiB.
const maxVmlinux = 512 << 20

// xenNotePhys32Entry is XEN_ELFNOTE_PHYS32_ENTRY, the PVH entry point.
const xenNotePhys32Entry = 18

// ExtractPVH returns the path of the uncompressed kernel ELF inside the
// bzImage at path, written to cacheDir under the bzImage's digest and
// reused from there. It fails with ErrNoPVH when the image is not a
// bzImage, or its kernel has no PVH entry or is compressed in a way it
// does not read (xz with the x86 BCJ filter, bzip2, lzma, lzo): the image
// then boots as it is.
func ExtractPVH(ctx context.Context, path, cacheDir string) (string, error) {
	img, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read kernel image: %w", err)
	}
	dst := filepath.Join(cacheDir, pvhName(img))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	payload, err := bzImagePayload(img)
	if errors.Is(err, errNotBzImage) {
		// QEMU may still boot it (an ELF, a multiboot image): as it is.
		return "", fmt.Errorf("kernel image %s: %w (%w)", path, err, ErrNoPVH)
	}
	if err != nil {
		return "", fmt.Errorf("kernel image %s: %w", path, err)
	}
	// Decompressed straight into the cache's temporary file, checked
	// there, and put in place only if it boots through PVH.
	err = installCacheFile(cacheDir, dst, ".vmlinux-*.tmp", func(f *os.File) error {
		if err := decompressPayload(ctx, f, payload); err != nil {
			return err
		}
		return checkPVH(f)
	})
	if err != nil {
		return "", fmt.Errorf("kernel image %s: %w", path, err)
	}
	return dst, nil
}

// pvhName names the ELF extracted from the bzImage img.
func pvhName(img []byte) string {
	sum := sha256.Sum256(img)
	return "vmlinux-" + hex.EncodeToString(sum[:16])
}

// PrunePVH removes the ELFs ExtractPVH left in cacheDir for kernel images
// other than keep.
func PrunePVH(cacheDir string, keep ...string) error {
	names := map[string]bool{}
	for _, k := range keep {
		img, err := os.ReadFile(k)
		if err != nil {
			return fmt.Errorf("read kernel image: %w", err)
		}
		names[pvhName(img)] = true
	}
	if err := pruneCache(cacheDir, names, "vmlinux-*"); err != nil {
		return fmt.Errorf("prune uncompressed kernels: %w", err)
	}
	return nil
}

// pruneCache removes the files in cacheDir that match patterns, but for
// those whose names keep holds.
func pruneCache(cacheDir string, keep map[string]bool, patterns ...string) error {
	for _, pattern := range patterns {
		all, err := filepath.Glob(filepath.Join(cacheDir, pattern))
		if err != nil {
			return err
		}
		for _, f := range all {
			if keep[filepath.Base(f)] {
				continue
			}
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// bzImagePayload is the compressed kernel inside a bzImage.
func bzImagePayload(img []byte) ([]byte, error) {
	if len(img) < setupHeaderEnd {
		return nil, fmt.Errorf("%d bytes: %w", len(img), errNotBzImage)
	}
	if _, err := bzImageVersion(bytes.NewReader(img)); err != nil {
		return nil, err
	}
	if proto := binary.LittleEndian.Uint16(img[offProtocol:]); proto < 0x208 {
		return nil, fmt.Errorf("boot protocol %#x has no payload fields: %w", proto, ErrNoPVH)
	}
	sects := int(img[offSetupSects])
	if sects == 0 {
		sects = 4
	}
	start := (sects+1)*512 + int(binary.LittleEndian.Uint32(img[offPayloadOffset:]))
	end := start + int(binary.LittleEndian.Uint32(img[offPayloadLength:]))
	if start >= end || end > len(img) {
		return nil, fmt.Errorf("payload [%d, %d) outside the %d-byte image: %w", start, end, len(img), errNotBzImage)
	}
	return img[start:end], nil
}

// decompressPayload reads the formats a kernel's build may use, by their
// magic numbers.
func decompressPayload(ctx context.Context, w io.Writer, p []byte) error {
	var r io.Reader
	var err error
	switch {
	case bytes.HasPrefix(p, []byte{0x1f, 0x8b}):
		r, err = gzip.NewReader(bytes.NewReader(p))
	case bytes.HasPrefix(p, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		var d *zstd.Decoder
		d, err = zstd.NewReader(bytes.NewReader(p), zstd.WithDecoderConcurrency(1))
		if err == nil {
			defer d.Close()
			r = d
		}
	case bytes.HasPrefix(p, []byte{0x02, 0x21, 0x4c, 0x18}):
		// The kernel's legacy LZ4 frame ends with the uncompressed size,
		// which the reader knows to skip.
		r = lz4.NewReader(bytes.NewReader(p))
	case bytes.HasPrefix(p, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}):
		r, err = xz.NewReader(bytes.NewReader(p))
	default:
		return fmt.Errorf("kernel compressed in an unsupported format (magic % x): %w", p[:min(len(p), 4)], ErrNoPVH)
	}
	if err != nil {
		return fmt.Errorf("open compressed kernel: %w (%w)", err, ErrNoPVH)
	}
	// Not interruptible: a kernel decompresses in well under a second.
	if err := ctx.Err(); err != nil {
		return err
	}
	n, err := io.Copy(w, io.LimitReader(r, maxVmlinux+1))
	if err != nil {
		return fmt.Errorf("decompress kernel: %w (%w)", err, ErrNoPVH)
	}
	if n > maxVmlinux {
		return fmt.Errorf("kernel decompresses to more than %d MiB: %w", maxVmlinux>>20, ErrNoPVH)
	}
	return nil
}

// checkPVH checks that r is an x86-64 ELF with a PVH entry note.
func checkPVH(r io.ReaderAt) error {
	f, err := elf.NewFile(r)
	if err != nil {
		return fmt.Errorf("uncompressed kernel is not an ELF: %w (%w)", err, ErrNoPVH)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("uncompressed kernel is for %v: %w", f.Machine, ErrNoPVH)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(p.Open())
		if err != nil {
			return fmt.Errorf("read ELF notes: %w (%w)", err, ErrNoPVH)
		}
		if hasXenNote(notes, f.ByteOrder, xenNotePhys32Entry) {
			return nil
		}
	}
	return fmt.Errorf("kernel built without CONFIG_PVH: %w", ErrNoPVH)
}

// hasXenNote walks ELF notes (name and descriptor padded to 4 bytes) for
// one named "Xen" of type typ.
func hasXenNote(b []byte, bo binary.ByteOrder, typ uint32) bool {
	pad := func(n uint32) int { return int((n + 3) &^ 3) }
	for len(b) >= 12 {
		namesz, descsz, t := bo.Uint32(b), bo.Uint32(b[4:]), bo.Uint32(b[8:])
		b = b[12:]
		if pad(namesz) > len(b) {
			return false
		}
		name := strings.TrimRight(string(b[:namesz]), "\x00")
		b = b[pad(namesz):]
		if pad(descsz) > len(b) {
			return false
		}
		b = b[pad(descsz):]
		if name == "Xen" && t == typ {
			return true
		}
	}
	return false
}
