package qemu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// stream builds QEMU 7.2 migration streams for splitRAM's tests, in the
// format migration/savevm.c and migration/ram.c write.
type stream struct{ bytes.Buffer }

func (s *stream) u8(v byte) *stream     { s.WriteByte(v); return s }
func (s *stream) be32(v uint32) *stream { s.Write(binary.BigEndian.AppendUint32(nil, v)); return s }
func (s *stream) be64(v uint64) *stream { s.Write(binary.BigEndian.AppendUint64(nil, v)); return s }
func (s *stream) str(v string) *stream  { s.u8(byte(len(v))); s.WriteString(v); return s }
func (s *stream) raw(b []byte) *stream  { s.Write(b); return s }

// header is the file header and a configuration section naming machine.
func (s *stream) header(machine string) *stream {
	return s.be32(qemuFileMagic).be32(qemuFileVersion).u8(sectionConfiguration).be32(uint32(len(machine))).raw([]byte(machine))
}

type testBlock struct {
	id   string
	size uint64
}

// ramStart is the RAM section's start listing blocks; withAddr adds the
// address x-ignore-shared sends (0).
func (s *stream) ramStart(blocks []testBlock, withAddr bool) *stream {
	var total uint64
	for _, b := range blocks {
		total += b.size
	}
	s.u8(sectionStart).be32(2).str("ram").be32(0).be32(4).be64(total | ramFlagMemSize)
	for _, b := range blocks {
		s.str(b.id).be64(b.size)
		if withAddr {
			s.be64(0)
		}
	}
	return s.be64(ramFlagEOS).footer(2)
}

func (s *stream) section(kind byte) *stream { return s.u8(kind).be32(2) }
func (s *stream) footer(id uint32) *stream  { return s.u8(sectionFooter).be32(id) }
func (s *stream) eos() *stream              { return s.be64(ramFlagEOS).footer(2) }

// page is a page record: block "" continues the last one.
func (s *stream) page(block string, offset uint64, data []byte) *stream {
	if block == "" {
		s.be64(offset | ramFlagPage | ramFlagContinue)
	} else {
		s.be64(offset | ramFlagPage).str(block)
	}
	return s.raw(data)
}

func (s *stream) zero(block string, offset uint64, fill byte) *stream {
	if block == "" {
		s.be64(offset | ramFlagZero | ramFlagContinue)
	} else {
		s.be64(offset | ramFlagZero).str(block)
	}
	return s.u8(fill)
}

func filled(b byte) []byte { return bytes.Repeat([]byte{b}, guestPageSize) }

// memFile is a memory file in memory that remembers which pages were
// written.
type memFile struct {
	data    []byte
	written map[int64]bool
}

func newMemFile(size int64) *memFile {
	return &memFile{data: make([]byte, size), written: map[int64]bool{}}
}

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > int64(len(m.data)) {
		return 0, io.ErrShortWrite
	}
	for o := off; o < off+int64(len(p)); o += guestPageSize {
		m.written[o/guestPageSize] = true
	}
	return copy(m.data[off:], p), nil
}

func TestSplitRAM(t *testing.T) {
	const ramSize = 16 * guestPageSize
	blocks := []testBlock{{"pc.ram", ramSize}, {"pc.rom", 2 * guestPageSize}}
	devices := []byte("\x04\x00\x00\x00\x03device state\x7e\x00\x00\x00\x03\x08\x06{}")

	var in stream
	in.header("pc-q35-7.2").ramStart(blocks, false)
	in.section(sectionPart).
		page("pc.ram", 0, filled('a')).
		zero("", 1*guestPageSize, 0).
		page("", 2*guestPageSize, filled('b')).
		page("", 3*guestPageSize, filled('c')).
		page("pc.rom", 0, filled('r')).
		page("pc.ram", 5*guestPageSize, filled('d')).
		zero("pc.rom", guestPageSize, 0).
		zero("pc.ram", 6*guestPageSize, 'z').
		eos()
	// A later pass: page 0 became zero, page 2 changed.
	in.section(sectionPart).zero("pc.ram", 0, 0).page("", 2*guestPageSize, filled('B')).eos()
	in.section(sectionEnd).page("pc.ram", 15*guestPageSize, filled('e')).eos()
	in.raw(devices)

	// What QEMU sends with x-ignore-shared and pc.ram shared: the
	// capability, block addresses, and only the ROM's pages, the second
	// naming its block no more.
	var want stream
	want.header("pc-q35-7.2").raw(ignoreSharedCapability).ramStart(blocks, true)
	want.section(sectionPart).page("pc.rom", 0, filled('r')).zero("", guestPageSize, 0).eos()
	want.section(sectionPart).eos()
	want.section(sectionEnd).eos()
	want.raw(devices)

	var out bytes.Buffer
	mem := newMemFile(ramSize)
	stats, err := splitRAM(&in, &out, mem, "pc.ram", ramSize)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want.Bytes()) {
		t.Errorf("stream:\n%q\nwant:\n%q", out.Bytes(), want.Bytes())
	}
	wantPages := map[int64][]byte{0: filled(0), 2: filled('B'), 3: filled('c'), 5: filled('d'), 6: filled('z'), 15: filled('e')}
	for p := int64(0); p < ramSize/guestPageSize; p++ {
		page := mem.data[p*guestPageSize : (p+1)*guestPageSize]
		w, ok := wantPages[p]
		if !ok {
			w = filled(0)
		}
		if !bytes.Equal(page, w) {
			t.Errorf("memory page %d starts %q, want %q", p, page[:4], w[:4])
		}
		if mem.written[p] != ok {
			t.Errorf("memory page %d written: %v, want %v", p, mem.written[p], ok)
		}
	}
	if stats.pages != 8 || stats.zeroPages != 1 {
		t.Errorf("stats %+v, want 8 pages written and 1 zero page skipped", stats)
	}
}

func TestSplitRAMRefuses(t *testing.T) {
	const ramSize = 4 * guestPageSize
	blocks := []testBlock{{"pc.ram", ramSize}}
	withPages := func(pages func(s *stream)) func(s *stream) {
		return func(s *stream) {
			s.header("pc-q35-7.2").ramStart(blocks, false).section(sectionPart)
			pages(s)
			s.eos().section(sectionEnd).eos().u8(0x08)
		}
	}
	for _, tc := range []struct {
		name string
		in   func(s *stream)
		// truncated is a stream that ends early: the migration failed,
		// which is not a format to give up on.
		truncated bool
	}{
		{"not a stream", func(s *stream) { s.raw([]byte("hello, world")) }, false},
		{"no configuration", func(s *stream) { s.be32(qemuFileMagic).be32(qemuFileVersion).u8(sectionStart) }, false},
		{"configuration subsection", func(s *stream) { s.header("pc-q35-7.2").raw(ignoreSharedCapability) }, false},
		{"another iterative section", func(s *stream) {
			s.header("pc-q35-7.2").u8(sectionStart).be32(2).str("block").be32(0).be32(1)
		}, false},
		{"RAM block of another size", func(s *stream) {
			s.header("pc-q35-7.2").ramStart([]testBlock{{"pc.ram", 2 * ramSize}}, false)
		}, false},
		{"compressed page", withPages(func(s *stream) { s.be64(0x100).str("pc.ram").be32(10) }), false},
		{"XBZRLE page", withPages(func(s *stream) { s.be64(0x40).str("pc.ram") }), false},
		{"page beyond the RAM", withPages(func(s *stream) { s.page("pc.ram", ramSize, filled('x')) }), false},
		{"continuation of nothing", withPages(func(s *stream) { s.page("", 0, filled('x')) }), false},
		{"no footer", func(s *stream) {
			s.header("pc-q35-7.2").ramStart(blocks, false).section(sectionPart).be64(ramFlagEOS).u8(0x08)
		}, false},
		{"device section before the RAM's end", func(s *stream) {
			s.header("pc-q35-7.2").ramStart(blocks, false).u8(0x04).be32(3).str("timer").be32(0).be32(2)
		}, false},
		{"truncated page", func(s *stream) {
			s.header("pc-q35-7.2").ramStart(blocks, false).section(sectionPart).be64(ramFlagPage).str("pc.ram").raw([]byte("abc"))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in stream
			tc.in(&in)
			_, err := splitRAM(&in, io.Discard, newMemFile(ramSize), "pc.ram", ramSize)
			if err == nil {
				t.Fatal("split")
			}
			if errors.Is(err, errNotSplittable) == tc.truncated {
				t.Errorf("error %v: errNotSplittable %v, want %v", err, !tc.truncated, !tc.truncated)
			}
		})
	}
}
