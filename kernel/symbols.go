package kernel

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Symbols names addresses in the guest kernel's text, from the System.map
// its build wrote. Guests booted through the kernel's PVH entry (pvh.go),
// as huskd's are, run without KASLR, so a vCPU's instruction pointer
// falls where the map says; a kernel booted through its own decompressor
// places itself at random, and the names would be wrong.
type Symbols struct {
	addrs []uint64 // sorted
	names []string
}

// symbolMaps are where the kernel's System.map may lie: beside the image,
// as `make kernel` leaves it, or where Debian's linux-image-*-dbg package
// puts it. Debian's /boot/System.map-<version> is a one-line placeholder
// that LoadSymbols refuses.
func (k Kernel) symbolMaps() []string {
	name := "System.map-" + k.Version
	return []string{filepath.Join(filepath.Dir(k.Path), name), filepath.Join("/usr/lib/debug/boot", name)}
}

// LoadSymbols reads a System.map ("address type name" per line), keeping
// the text symbols.
func LoadSymbols(path string) (*Symbols, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kernel symbols: %w", err)
	}
	defer f.Close()
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || !strings.ContainsAny(fields[1], "tTwW") {
			continue
		}
		addr, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			continue
		}
		syms = append(syms, sym{addr, fields[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kernel symbols %s: %w", path, err)
	}
	if len(syms) == 0 {
		return nil, fmt.Errorf("kernel symbols %s: no text symbols", path)
	}
	slices.SortStableFunc(syms, func(a, b sym) int { return cmp.Compare(a.addr, b.addr) })
	s := &Symbols{addrs: make([]uint64, len(syms)), names: make([]string, len(syms))}
	for i, y := range syms {
		s.addrs[i], s.names[i] = y.addr, y.name
	}
	return s, nil
}

// maxSymbolSize bounds how far past a symbol an address is still taken
// to be in it; beyond that (past the kernel's text, in a module or in
// user space) it gets no name.
const maxSymbolSize = 1 << 20

// Name gives pc as "symbol+0xoff", or "" when it is not in the kernel's
// text.
func (s *Symbols) Name(pc uint64) string {
	i, found := slices.BinarySearch(s.addrs, pc)
	if !found {
		i--
	}
	if i < 0 || i == len(s.addrs)-1 || pc-s.addrs[i] > maxSymbolSize {
		return ""
	}
	return fmt.Sprintf("%s+%#x", s.names[i], pc-s.addrs[i])
}

// Symbolizer returns a function that names guest kernel addresses, for
// the rare report of a guest that hung. It reads k's System.map on its
// first call, not before; without a map every name is "".
func Symbolizer(k Kernel) func(pc uint64) string {
	return symbolizer(k.symbolMaps())
}

func symbolizer(maps []string) func(pc uint64) string {
	load := sync.OnceValue(func() *Symbols {
		for _, path := range maps {
			if s, err := LoadSymbols(path); err == nil {
				return s
			}
		}
		return nil
	})
	return func(pc uint64) string {
		s := load()
		if s == nil {
			return ""
		}
		return s.Name(pc)
	}
}
