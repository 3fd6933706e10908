package e2e

import (
	"strings"
	"testing"
)

// TestParseSmaps checks the memory breakdown on a trimmed smaps of a
// template-restored QEMU: guest RAM (the file-mapped 256 MiB), the
// 64 MiB translation buffer, the binary, and private heap.
func TestParseSmaps(t *testing.T) {
	smaps := `7ff40fe00000-7ff41fe00000 rw-p 00000000 08:01 1234 /var/lib/husk/templates/x/vm/memory
Size:             262144 kB
Rss:               36864 kB
Pss:               18432 kB
7ff428000000-7ff42bfff000 rwxp 00000000 00:00 0 
Size:              65532 kB
Rss:               36864 kB
Pss:               36864 kB
55fc39a46000-55fc39fdd000 r-xp 00407000 08:01 5678 /usr/bin/qemu-system-x86_64
Size:               5724 kB
Rss:                5400 kB
Pss:                2700 kB
55fc60262000-55fc61558000 rw-p 00000000 00:00 0 [heap]
Size:              19416 kB
Rss:                5432 kB
Pss:                5432 kB
`
	m, err := parseSmaps(strings.NewReader(smaps), 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	mib := func(kb float64) float64 { return kb / 1024 }
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"RSS", m.RSSMiB, mib(36864 + 36864 + 5400 + 5432)},
		{"guest", m.GuestMiB, mib(36864)},
		{"overhead", m.OverheadMiB, mib(36864 + 5400 + 5432)},
		{"TCG buffer", m.TCGBufferMiB, mib(36864)},
		{"file-backed", m.FileMiB, mib(5400)},
		{"private", m.PrivateMiB, mib(5432)},
		{"PSS overhead", m.OverheadPSSMiB, mib(36864 + 2700 + 5432)},
	} {
		if c.got != c.want {
			t.Errorf("%s = %.3f MiB, want %.3f", c.name, c.got, c.want)
		}
	}
}
