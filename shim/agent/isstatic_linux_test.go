package agent

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// elfWith writes a 64-bit little-endian ELF header followed by program
// headers of the given types, as isStatic reads them.
func elfWith(t *testing.T, types ...elf.ProgType) string {
	t.Helper()
	const ehsize, phentsize = 64, 56
	b := make([]byte, ehsize+phentsize*len(types))
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1 // ELFCLASS64, ELFDATA2LSB, EV_CURRENT
	binary.LittleEndian.PutUint64(b[32:], ehsize)
	binary.LittleEndian.PutUint16(b[54:], phentsize)
	binary.LittleEndian.PutUint16(b[56:], uint16(len(types)))
	for i, typ := range types {
		binary.LittleEndian.PutUint32(b[ehsize+i*phentsize:], uint32(typ))
	}
	path := filepath.Join(t.TempDir(), "elf")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestIsStatic(t *testing.T) {
	for _, tc := range []struct {
		name   string
		types  []elf.ProgType
		static bool
	}{
		{"no program headers", nil, true},
		{"loads only", []elf.ProgType{elf.PT_LOAD, elf.PT_LOAD, elf.PT_NOTE}, true},
		{"interpreter first", []elf.ProgType{elf.PT_PHDR, elf.PT_INTERP, elf.PT_LOAD}, false},
		{"interpreter last", []elf.ProgType{elf.PT_LOAD, elf.PT_DYNAMIC, elf.PT_INTERP}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := isStatic(elfWith(t, tc.types...))
			if err != nil || got != tc.static {
				t.Errorf("isStatic = %v, %v; want %v", got, err, tc.static)
			}
		})
	}
}

// TestIsStaticAgreesWithDebugElf reads real binaries both ways.
func TestIsStaticAgreesWithDebugElf(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{exe, "/bin/sh"} {
		f, err := elf.Open(path)
		if err != nil {
			t.Logf("%s: %v", path, err)
			continue
		}
		want := true
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				want = false
			}
		}
		f.Close()
		if got, err := isStatic(path); err != nil || got != want {
			t.Errorf("isStatic(%s) = %v, %v; debug/elf says %v", path, got, err, want)
		}
	}
}

func TestIsStaticRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"script": "#!/bin/sh\necho hi\n" + string(make([]byte, 64)),
		"short":  "\x7fELF",
		"elf32":  "\x7fELF\x01\x01\x01" + string(make([]byte, 57)),
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		if got, err := isStatic(path); err == nil {
			t.Errorf("%s: isStatic = %v, want an error", name, got)
		}
	}
}
