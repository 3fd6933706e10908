package e2e

import (
	"strings"
	"testing"
)

// TestParseSmaps checks the memory breakdown on trimmed smaps of
// template-restored QEMUs: guest RAM (the file-mapped 256 MiB), TCG's
// translation buffer, the binary, and private heap.
func TestParseSmaps(t *testing.T) {
	const (
		guestRAM = `7ff40fe00000-7ff41fe00000 rw-p 00000000 08:01 1234 /var/lib/husk/templates/x/vm/memory
Size:             262144 kB
Rss:               36864 kB
Pss:               18432 kB
`
		binary = `55fc39a46000-55fc39fdd000 r-xp 00407000 08:01 5678 /usr/bin/qemu-system-x86_64
Size:               5724 kB
Rss:                5400 kB
Pss:                2700 kB
`
		heap = `55fc60262000-55fc61558000 rw-p 00000000 00:00 0 [heap]
Size:              19416 kB
Rss:                5432 kB
Pss:                5432 kB
`
	)
	mib := func(kb float64) float64 { return kb / 1024 }
	for _, c := range []struct {
		name string
		// buffer is the translation buffer's mappings.
		buffer string
		// bufferKB is their resident size.
		bufferKB float64
	}{
		{"one vCPU: one mapping", `7ff428000000-7ff42bfff000 rwxp 00000000 00:00 0 
Size:              65532 kB
Rss:               36864 kB
Pss:               36864 kB
`, 36864},
		// QEMU splits the buffer into regions with guard pages between
		// them for more than one vCPU.
		{"two vCPUs: regions", `7fa180000000-7fa1803ff000 rwxp 00000000 00:00 0 
Size:               4092 kB
Rss:                4092 kB
Pss:                4092 kB
7fa1803ff000-7fa180400000 ---p 00000000 00:00 0 
Size:                  4 kB
Rss:                   0 kB
Pss:                   0 kB
7fa180400000-7fa1807ff000 rwxp 00000000 00:00 0 
Size:               4092 kB
Rss:                1024 kB
Pss:                1024 kB
`, 4092 + 1024},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := parseSmaps(strings.NewReader(guestRAM+c.buffer+binary+heap), 256<<20)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"RSS", m.RSSMiB, mib(36864 + c.bufferKB + 5400 + 5432)},
				{"guest", m.GuestMiB, mib(36864)},
				{"overhead", m.OverheadMiB, mib(c.bufferKB + 5400 + 5432)},
				{"TCG buffer", m.TCGBufferMiB, mib(c.bufferKB)},
				{"file-backed", m.FileMiB, mib(5400)},
				{"private", m.PrivateMiB, mib(5432)},
				{"PSS overhead", m.OverheadPSSMiB, mib(c.bufferKB + 2700 + 5432)},
			} {
				if f.got != f.want {
					t.Errorf("%s = %.3f MiB, want %.3f", f.name, f.got, f.want)
				}
			}
		})
	}
}

// TestParseInfoJit reads QEMU 7.2's info jit, and refuses other text.
func TestParseInfoJit(t *testing.T) {
	out := "Translation buffer state:\r\n" +
		"gen code size       33751715/67103744\r\n" +
		"TB count            58959\r\n" +
		"TB avg target size  16 max=512 bytes\r\n" +
		"cross page TB count 166 (0%)\r\n" +
		"\r\nStatistics:\r\n" +
		"TB flush count      1\r\n"
	if n, f, err := parseInfoJit(out); err != nil || n != 58959 || f != 1 {
		t.Errorf("parseInfoJit = %d, %d, %v; want 58959, 1", n, f, err)
	}
	for _, bad := range []string{"TB flush count      1\n", "TB count 12\n", "TB count x\nTB flush count 0\n"} {
		if n, f, err := parseInfoJit(bad); err == nil {
			t.Errorf("parseInfoJit(%q) = %d, %d; want an error", bad, n, f)
		}
	}
}

// TestBootImagesResident counts only the kernel cache's mappings: an
// anonymous mapping right after one (the guest's RAM) is not one.
func TestBootImagesResident(t *testing.T) {
	const smaps = `7f0fb4a00000-7f0fb7cc7000 rw-p 00000000 fe:00 9986123    /var/lib/husk/kernel/vmlinux-5134
Size:              51996 kB
Rss:               45376 kB
7f0fb8000000-7f0fc8000000 rw-p 00000000 00:00 0
Size:             262144 kB
Rss:               88188 kB
7f0fd8600000-7f0fd8c64000 r--p 00000000 fe:00 9986077    /var/lib/husk/kernel/initramfs-339a.cpio
Size:               6544 kB
Rss:                   8 kB
7f0fd9000000-7f0fd9100000 r-xp 00000000 fe:00 1234       /usr/bin/qemu-system-x86_64
Rss:                1024 kB
`
	images, rss, err := bootImagesResident(strings.NewReader(smaps))
	if err != nil || images != 2 || rss != 45376+8 {
		t.Errorf("images %d, rss %d KiB, err %v; want 2, %d KiB", images, rss, err, 45376+8)
	}
}
