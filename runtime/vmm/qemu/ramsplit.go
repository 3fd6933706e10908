package qemu

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Splitting a snapshot's RAM out of its stream. A VM whose RAM is not a
// shared file (every container's: restores map their template's file
// privately) migrates its RAM inside the stream, page by page, and a
// restore loads it all before the guest runs: every page is written or,
// for a zero page, read to check it (QEMU 7.2's ram_handle_compressed),
// so a 256 MiB guest takes 65,536 page faults up front. On this
// nested-virtualised host that is ~1.1 s of a checkpoint's restore. A
// snapshot whose RAM is a file (layout.FileMemory) restores by mapping
// the file copy-on-write instead, and faults in only what the guest
// touches, as a template's restore does.
//
// QEMU 7.2 cannot write RAM to a file of its own (mapped-ram came in
// 9.0), so Snapshot reads the stream through a pipe and rewrites it as
// it goes: the pages of the guest's RAM block go into a sparse memory
// file at their offsets, and the rest is the stream QEMU would have
// written with x-ignore-shared on and that block shared, which a restore
// mapping the file loads. That is hand-written because no library reads
// QEMU's migration format, and it reads only what it must: the header,
// the configuration section's start, and the "ram" sections, whose
// format (migration/ram.c) is a list of page records. Everything after
// the last RAM section (device state, end marker, description) is
// copied as it is. A stream with anything else (compressed or XBZRLE
// pages, other iterative sections, a configuration subsection) is
// errNotSplittable, and Snapshot writes it whole instead.
const (
	qemuFileMagic   = 0x5145564d // "QEVM"
	qemuFileVersion = 3

	sectionStart         = 0x01
	sectionPart          = 0x02
	sectionEnd           = 0x03
	sectionConfiguration = 0x07
	sectionFooter        = 0x7e

	ramFlagZero     = 0x02
	ramFlagMemSize  = 0x04
	ramFlagPage     = 0x08
	ramFlagEOS      = 0x10
	ramFlagContinue = 0x20
	// ramFlagMask covers the flags in a page record's low bits: offsets
	// are page-aligned.
	ramFlagMask = guestPageSize - 1

	guestPageSize = 4096
	// splitWriteMax bounds the run of consecutive pages written to the
	// memory file at once.
	splitWriteMax = 1 << 20
)

// ignoreSharedCapability is the configuration section's subsection that
// a source with x-ignore-shared on sends (configuration/capabilities,
// version 1, one capability), which a destination with it on requires.
var ignoreSharedCapability = []byte("\x05\x1aconfiguration/capabilities\x00\x00\x00\x01\x00\x00\x00\x01\x0fx-ignore-shared")

// errNotSplittable is a stream splitRAM does not know how to rewrite.
var errNotSplittable = errors.New("migration stream not splittable")

// splitStats says what splitRAM moved into the memory file.
type splitStats struct {
	pages, zeroPages int
}

// splitRAM reads a migration stream from r and writes it to state without
// the pages of RAM block ramID, which go into mem at their offsets; mem
// must read as ramSize zero bytes to begin with (a sparse file), and its
// zero pages are not written.
func splitRAM(r io.Reader, state io.Writer, mem io.WriterAt, ramID string, ramSize int64) (splitStats, error) {
	s := &splitter{
		in: bufio.NewReaderSize(r, 1<<20), out: bufio.NewWriterSize(state, 1<<20), mem: mem,
		ramID: ramID, ramSize: ramSize, written: make([]uint64, (ramSize/guestPageSize+63)/64),
	}
	if err := s.split(); err != nil {
		return s.stats, err
	}
	return s.stats, s.out.Flush()
}

type splitter struct {
	in      *bufio.Reader
	out     *bufio.Writer
	mem     io.WriterAt
	ramID   string
	ramSize int64
	// inBlock and outBlock are the RAM blocks the last page record read
	// and written named, which a record flagged CONTINUE refers to.
	inBlock, outBlock string
	// written marks the memory file's pages that hold data.
	written []uint64
	// run is consecutive pages not yet written to mem, from runOffset.
	run       []byte
	runOffset int64
	sawRAM    bool
	stats     splitStats
}

func (s *splitter) split() error {
	if magic, err := s.be32(); err != nil || magic != qemuFileMagic {
		return notSplittable(err, "not a QEMU migration stream")
	}
	if v, err := s.be32(); err != nil || v != qemuFileVersion {
		return notSplittable(err, "stream version %d", v)
	}
	if t, err := s.byte(); err != nil || t != sectionConfiguration {
		return notSplittable(err, "no configuration section")
	}
	n, err := s.be32()
	if err != nil {
		return err
	}
	if _, err := s.bytes(int(n)); err != nil {
		return err
	}
	// The machine type's name ends the configuration unless a subsection
	// follows, which only a source with x-ignore-shared (or a page size
	// other than the default) sends.
	if next, err := s.in.Peek(1); err != nil || next[0] != sectionStart {
		return notSplittable(err, "configuration subsection")
	}
	if _, err := s.out.Write(ignoreSharedCapability); err != nil {
		return err
	}
	ramSection := uint32(0)
	for {
		t, err := s.byte()
		if err != nil {
			return err
		}
		id, err := s.be32()
		if err != nil {
			return err
		}
		switch t {
		case sectionStart:
			name, err := s.shortString()
			if err != nil {
				return err
			}
			if name != "ram" || s.sawRAM {
				return notSplittable(nil, "iterative section %q", name)
			}
			if err := s.putShortString(name); err != nil {
				return err
			}
			if _, err := s.bytes(8); err != nil { // instance and version
				return err
			}
			s.sawRAM, ramSection = true, id
			if err := s.ramSetup(); err != nil {
				return err
			}
		case sectionPart, sectionEnd:
			if !s.sawRAM || id != ramSection {
				return notSplittable(nil, "section %d of type %d", id, t)
			}
			if err := s.pages(); err != nil {
				return err
			}
		default:
			return notSplittable(nil, "section type %d before the RAM ended", t)
		}
		if err := s.footer(); err != nil {
			return err
		}
		if t == sectionEnd {
			if err := s.flushRun(); err != nil {
				return err
			}
			// Device state and the end of the stream.
			_, err := io.Copy(s.out, s.in)
			return err
		}
	}
}

// ramSetup copies the RAM section's start, the list of RAM blocks, adding
// the guest-physical address x-ignore-shared has each carry. The loader
// compares it only for blocks it ignores, and a source with
// x-ignore-shared sends 0 for the guest's RAM block.
func (s *splitter) ramSetup() error {
	v, err := s.be64()
	if err != nil {
		return err
	}
	if v&ramFlagMask != ramFlagMemSize {
		return notSplittable(nil, "RAM section starts with flags %#x", v&ramFlagMask)
	}
	if err := s.put64(v); err != nil {
		return err
	}
	for total := v &^ ramFlagMask; total > 0; {
		id, err := s.shortString()
		if err != nil {
			return err
		}
		length, err := s.be64()
		if err != nil {
			return err
		}
		if length > total {
			return notSplittable(nil, "RAM block %q longer than the RAM", id)
		}
		total -= length
		if id == s.ramID && int64(length) != s.ramSize {
			return notSplittable(nil, "RAM block %q is %d bytes, not %d", id, length, s.ramSize)
		}
		if err := s.putShortString(id); err != nil {
			return err
		}
		if err := s.put64(length); err != nil {
			return err
		}
		if err := s.put64(0); err != nil {
			return err
		}
	}
	v, err = s.be64()
	if err != nil {
		return err
	}
	if v != ramFlagEOS {
		return notSplittable(nil, "RAM block list ends with %#x", v)
	}
	return s.put64(v)
}

// pages copies a RAM section's page records up to its end marker, moving
// those of the guest's RAM block into the memory file.
func (s *splitter) pages() error {
	page := make([]byte, guestPageSize)
	for {
		v, err := s.be64()
		if err != nil {
			return err
		}
		flags, offset := v&ramFlagMask, int64(v&^ramFlagMask)
		if flags == ramFlagEOS {
			return s.put64(v)
		}
		kind := flags &^ ramFlagContinue
		if kind != ramFlagZero && kind != ramFlagPage {
			return notSplittable(nil, "page record flags %#x", flags)
		}
		if flags&ramFlagContinue == 0 {
			if s.inBlock, err = s.shortString(); err != nil {
				return err
			}
		} else if s.inBlock == "" {
			return notSplittable(nil, "page record continues no block")
		}
		if s.inBlock == s.ramID {
			if offset < 0 || offset+guestPageSize > s.ramSize {
				return notSplittable(nil, "page at %#x beyond the RAM", offset)
			}
			if kind == ramFlagPage {
				err = s.ramPage(offset)
			} else {
				err = s.ramZeroPage(offset, page)
			}
			if err != nil {
				return err
			}
			continue
		}
		// A page of another block (ROMs, ACPI tables) stays in the stream,
		// naming its block unless the last page written was of it too.
		if s.outBlock == s.inBlock {
			err = s.put64(uint64(offset) | kind | ramFlagContinue)
		} else {
			if err = s.put64(uint64(offset) | kind); err == nil {
				err = s.putShortString(s.inBlock)
			}
			s.outBlock = s.inBlock
		}
		if err != nil {
			return err
		}
		n := guestPageSize
		if kind == ramFlagZero {
			n = 1
		}
		if _, err := io.CopyN(s.out, s.in, int64(n)); err != nil {
			return unexpectedEOF(err)
		}
	}
}

// ramPage reads a page of the guest's RAM into the run to be written.
func (s *splitter) ramPage(offset int64) error {
	if len(s.run) > 0 && (offset != s.runOffset+int64(len(s.run)) || len(s.run) >= splitWriteMax) {
		if err := s.flushRun(); err != nil {
			return err
		}
	}
	if len(s.run) == 0 {
		s.runOffset = offset
		if s.run == nil {
			s.run = make([]byte, 0, splitWriteMax)
		}
	}
	n := len(s.run)
	s.run = s.run[:n+guestPageSize]
	if _, err := io.ReadFull(s.in, s.run[n:]); err != nil {
		return unexpectedEOF(err)
	}
	s.mark(offset)
	s.stats.pages++
	return nil
}

// ramZeroPage handles a page sent as one repeated byte: a zero page needs
// no write unless the file holds an earlier copy of it.
func (s *splitter) ramZeroPage(offset int64, page []byte) error {
	fill, err := s.in.ReadByte()
	if err != nil {
		return unexpectedEOF(err)
	}
	if fill == 0 && !s.marked(offset) {
		s.stats.zeroPages++
		return nil
	}
	if err := s.flushRun(); err != nil {
		return err
	}
	for i := range page {
		page[i] = fill
	}
	if _, err := s.mem.WriteAt(page, offset); err != nil {
		return fmt.Errorf("write guest memory: %w", err)
	}
	s.mark(offset)
	s.stats.pages++
	return nil
}

func (s *splitter) flushRun() error {
	if len(s.run) == 0 {
		return nil
	}
	if _, err := s.mem.WriteAt(s.run, s.runOffset); err != nil {
		return fmt.Errorf("write guest memory: %w", err)
	}
	s.run = s.run[:0]
	return nil
}

func (s *splitter) mark(offset int64) {
	p := offset / guestPageSize
	s.written[p/64] |= 1 << (p % 64)
}

func (s *splitter) marked(offset int64) bool {
	p := offset / guestPageSize
	return s.written[p/64]&(1<<(p%64)) != 0
}

// footer copies a section's footer, which machine types since QEMU 2.4
// send.
func (s *splitter) footer() error {
	next, err := s.in.Peek(1)
	if err != nil || next[0] != sectionFooter {
		return notSplittable(err, "section without a footer")
	}
	_, err = s.bytes(5)
	return err
}

// The readers below copy what they read to the output.

func (s *splitter) bytes(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(s.in, b); err != nil {
		return nil, unexpectedEOF(err)
	}
	_, err := s.out.Write(b)
	return b, err
}

func (s *splitter) byte() (byte, error) {
	b, err := s.bytes(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (s *splitter) be32() (uint32, error) {
	b, err := s.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(b), nil
}

// be64 reads without copying: page records are rewritten.
func (s *splitter) be64() (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(s.in, b[:]); err != nil {
		return 0, unexpectedEOF(err)
	}
	return binary.BigEndian.Uint64(b[:]), nil
}

// shortString reads a length byte and that many bytes, without copying.
func (s *splitter) shortString() (string, error) {
	n, err := s.in.ReadByte()
	if err != nil {
		return "", unexpectedEOF(err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.in, b); err != nil {
		return "", unexpectedEOF(err)
	}
	return string(b), nil
}

func (s *splitter) put64(v uint64) error {
	_, err := s.out.Write(binary.BigEndian.AppendUint64(nil, v))
	return err
}

func (s *splitter) putShortString(v string) error {
	if err := s.out.WriteByte(byte(len(v))); err != nil {
		return err
	}
	_, err := s.out.WriteString(v)
	return err
}

func notSplittable(err error, format string, args ...any) error {
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errNotSplittable, fmt.Sprintf(format, args...), unexpectedEOF(err))
	}
	return fmt.Errorf("%w: %s", errNotSplittable, fmt.Sprintf(format, args...))
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
