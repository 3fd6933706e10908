package kernel

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSymbols(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "System.map-6.1.0-test")
	if err := os.WriteFile(m, []byte(`ffffffff81000000 T _text
ffffffff81a17a00 t native_safe_halt
ffffffff81a17a20 T default_idle
ffffffff81a17a40 W weak_one
ffffffff82a00000 D some_data
ffffffff82c00000 T _etext
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSymbols(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pc   uint64
		want string
	}{
		{0xffffffff81a17a0b, "native_safe_halt+0xb"},
		{0xffffffff81a17a20, "default_idle+0x0"},
		{0xffffffff81a17a41, "weak_one+0x1"},
		{0xffffffff80ffffff, ""},                     // before the text
		{0xffffffff82d00000, ""},                     // past its end
		{0x00007f0000001000, ""},                     // user space
		{0xffffffff81a17a40 + maxSymbolSize + 1, ""}, // far past the last named
	} {
		if got := s.Name(tc.pc); got != tc.want {
			t.Errorf("Name(%#x) = %q, want %q", tc.pc, got, tc.want)
		}
	}

	// Debian's /boot map is a placeholder; the -dbg package's is real.
	placeholder := filepath.Join(dir, "placeholder")
	if err := os.WriteFile(placeholder, []byte("ffffffffffffffff B The real System.map is in the linux-image-<version>-dbg package\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSymbols(placeholder); err == nil {
		t.Error("the placeholder map loaded")
	}
	name := symbolizer([]string{placeholder, filepath.Join(dir, "missing"), m})
	if got := name(0xffffffff81a17a0b); got != "native_safe_halt+0xb" {
		t.Errorf("past a placeholder and a missing map: %q", got)
	}
	if got := symbolizer([]string{placeholder})(0xffffffff81a17a0b); got != "" {
		t.Errorf("without a map: %q", got)
	}
}

func TestSymbolMaps(t *testing.T) {
	k := Kernel{Path: "/var/cache/husk/kernel/bzImage-6.1.192", Version: "6.1.192"}
	got := k.symbolMaps()
	want := []string{"/var/cache/husk/kernel/System.map-6.1.192", "/usr/lib/debug/boot/System.map-6.1.192"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("symbolMaps = %q, want %q", got, want)
	}
}
