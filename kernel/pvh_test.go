package kernel

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"
)

// note is one ELF note as a kernel's linker script lays it out.
func note(name string, typ uint32, desc []byte) []byte {
	var b bytes.Buffer
	n := append([]byte(name), 0)
	binary.Write(&b, binary.LittleEndian, [3]uint32{uint32(len(n)), uint32(len(desc)), typ})
	b.Write(n)
	b.Write(make([]byte, (4-len(n)%4)%4))
	b.Write(desc)
	b.Write(make([]byte, (4-len(desc)%4)%4))
	return b.Bytes()
}

// fakeELF is an x86-64 ELF whose one PT_NOTE segment holds notes.
func fakeELF(t *testing.T, machine elf.Machine, notes []byte) []byte {
	t.Helper()
	const ehsize, phsize = 64, 56
	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Phoff: ehsize, Ehsize: ehsize, Phentsize: phsize, Phnum: 1, Shentsize: 64,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	prog := elf.Prog64{Type: uint32(elf.PT_NOTE), Flags: uint32(elf.PF_R), Off: ehsize + phsize,
		Filesz: uint64(len(notes)), Memsz: uint64(len(notes)), Align: 4}
	if err := binary.Write(&b, binary.LittleEndian, hdr); err != nil {
		t.Fatal(err)
	}
	if err := binary.Write(&b, binary.LittleEndian, prog); err != nil {
		t.Fatal(err)
	}
	b.Write(notes)
	return b.Bytes()
}

// payloadBzImage is fakeBzImage with its setup sectors counted, boot
// protocol proto and payload after some junk, as a real image has its
// decompressor before the payload.
func payloadBzImage(proto uint16, payload []byte) []byte {
	img := fakeBzImage("6.1.0-test (builder@host) #1 SMP")
	img[offSetupSects] = byte(len(img)/512 - 1)
	binary.LittleEndian.PutUint16(img[offProtocol:], proto)
	junk := bytes.Repeat([]byte{0xcc}, 100)
	binary.LittleEndian.PutUint32(img[offPayloadOffset:], uint32(len(junk)))
	binary.LittleEndian.PutUint32(img[offPayloadLength:], uint32(len(payload)))
	img = append(img, junk...)
	img = append(img, payload...)
	return append(img, bytes.Repeat([]byte{0xdd}, 64)...)
}

func compressWith(t *testing.T, format string, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	var err error
	switch format {
	case "gzip":
		w := gzip.NewWriter(&out)
		if _, err = w.Write(b); err == nil {
			err = w.Close()
		}
	case "zstd":
		var w *zstd.Encoder
		if w, err = zstd.NewWriter(&out); err == nil {
			if _, err = w.Write(b); err == nil {
				err = w.Close()
			}
		}
	case "lz4":
		// As the kernel's build makes it: a legacy frame followed by the
		// uncompressed size.
		w := lz4.NewWriter(&out)
		if err = w.Apply(lz4.LegacyOption(true)); err == nil {
			if _, err = w.Write(b); err == nil {
				err = w.Close()
			}
		}
		binary.Write(&out, binary.LittleEndian, uint32(len(b)))
	case "xz":
		var w *xz.Writer
		if w, err = xz.NewWriter(&out); err == nil {
			if _, err = w.Write(b); err == nil {
				err = w.Close()
			}
		}
	case "bzip2":
		return append([]byte("BZh9"), b...)
	default:
		t.Fatalf("no compressor %s", format)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestExtractPVH(t *testing.T) {
	entry := note("Xen", xenNotePhys32Entry, []byte{0, 0x10, 0, 0})
	pvh := fakeELF(t, elf.EM_X86_64, append(note("GNU", 3, make([]byte, 20)), entry...))
	cases := []struct {
		name    string
		proto   uint16
		payload []byte
		want    []byte // nil: ErrNoPVH
	}{
		{"gzip", 0x20f, compressWith(t, "gzip", pvh), pvh},
		{"zstd", 0x20f, compressWith(t, "zstd", pvh), pvh},
		{"lz4 as the kernel frames it", 0x20f, compressWith(t, "lz4", pvh), pvh},
		{"xz without the x86 filter", 0x20f, compressWith(t, "xz", pvh), pvh},
		{"bzip2 is not read", 0x20f, compressWith(t, "bzip2", pvh), nil},
		{"no PVH note", 0x20f, compressWith(t, "gzip", fakeELF(t, elf.EM_X86_64, note("Xen", 5, []byte("xen-3.0\x00")))), nil},
		{"not x86-64", 0x20f, compressWith(t, "gzip", fakeELF(t, elf.EM_AARCH64, entry)), nil},
		{"payload not an ELF", 0x20f, compressWith(t, "gzip", []byte("not an elf at all")), nil},
		{"protocol without payload fields", 0x206, compressWith(t, "gzip", pvh), nil},
		{"not a bzImage", 0, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			img := filepath.Join(dir, "bzImage")
			b := payloadBzImage(c.proto, c.payload)
			if c.proto == 0 {
				b = pvh // an ELF given as the kernel
			}
			if err := os.WriteFile(img, b, 0o644); err != nil {
				t.Fatal(err)
			}
			cache := filepath.Join(dir, "cache")
			got, err := ExtractPVH(context.Background(), img, cache)
			if c.want == nil {
				if !errors.Is(err, ErrNoPVH) {
					t.Fatalf("err = %v, want ErrNoPVH", err)
				}
				if left, _ := filepath.Glob(filepath.Join(cache, "*")); len(left) > 0 {
					t.Errorf("a refused kernel left %v", left)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			out, err := os.ReadFile(got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, c.want) {
				t.Errorf("extracted %d bytes, want the %d-byte ELF", len(out), len(c.want))
			}
		})
	}
}

// TestExtractPVHCache checks that an extracted kernel is reused rather
// than written again, that two kernels each keep their own, and that
// PrunePVH removes all but those it is told to keep.
func TestExtractPVHCache(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	entry := note("Xen", xenNotePhys32Entry, []byte{0, 0x10, 0, 0})
	write := func(name string, elfNotes []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, payloadBzImage(0x20f, compressWith(t, "gzip", fakeELF(t, elf.EM_X86_64, elfNotes))), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := write("bzImage-1", entry)
	got1, err := ExtractPVH(context.Background(), first, cache)
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(got1, past, past); err != nil {
		t.Fatal(err)
	}
	again, err := ExtractPVH(context.Background(), first, cache)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(again); again != got1 || err != nil || !st.ModTime().Equal(past) {
		t.Errorf("second extraction: %s (%v), want %s reused", again, err, got1)
	}
	second := write("bzImage-2", append(note("Linux", 1, []byte("other")), entry...))
	got2, err := ExtractPVH(context.Background(), second, cache)
	if err != nil {
		t.Fatal(err)
	}
	if got2 == got1 {
		t.Fatal("two kernels extracted to one file")
	}
	for _, p := range []string{got1, got2} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after extracting both kernels: %v", err)
		}
	}
	if err := PrunePVH(cache, second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(got1); !os.IsNotExist(err) {
		t.Errorf("the first kernel's ELF outlived the prune (%v)", err)
	}
	if _, err := os.Stat(got2); err != nil {
		t.Errorf("the kept kernel's ELF: %v", err)
	}
}

// TestExtractPVHHostKernel extracts the host's newest kernel, the one
// huskd boots by default, when it is readable.
func TestExtractPVHHostKernel(t *testing.T) {
	k, err := Find("")
	if err != nil {
		t.Skipf("no host kernel: %v", err)
	}
	got, err := ExtractPVH(context.Background(), k.Path, t.TempDir())
	if errors.Is(err, ErrNoPVH) {
		t.Skipf("%s boots as a bzImage: %v", k.Path, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(got)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		t.Errorf("extracted kernel is for %v", f.Machine)
	}
}
