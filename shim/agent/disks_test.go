package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDiskBySerial(t *testing.T) {
	sys := t.TempDir()
	write := func(path string, b []byte) {
		t.Helper()
		p := filepath.Join(sys, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	vpd := func(serial string) []byte {
		return append([]byte{0x00, 0x80, 0x00, byte(len(serial))}, serial...)
	}
	write("vda/serial", []byte("husk-base\n"))
	write("sda/device/vpd_pg80", vpd("husk-upper"))
	// A page whose length says less than the file holds.
	write("sdb/device/vpd_pg80", append(vpd("husk-x"), "junk"...))
	// A device identification page is not a serial.
	write("sdc/device/vpd_pg80", []byte{0x00, 0x83, 0x00, 0x04, 'h', 'u', 's', 'k'})
	write("loop0/size", []byte("0\n"))

	for _, c := range []struct{ serial, want string }{
		{"husk-base", "vda"},
		{"husk-upper", "sda"},
		{"husk-x", "sdb"},
		{"husk", ""},
		{"husk-missing", ""},
	} {
		if got := diskBySerial(sys, c.serial); got != c.want {
			t.Errorf("diskBySerial(%q) = %q, want %q", c.serial, got, c.want)
		}
	}
	if got := diskBySerial(filepath.Join(sys, "absent"), "husk-base"); got != "" {
		t.Errorf("no sysfs: got %q", got)
	}
}

func TestIsRemovable(t *testing.T) {
	sys := t.TempDir()
	for dev, v := range map[string]string{"sda": "1\n", "sdb": "0\n"} {
		if err := os.MkdirAll(filepath.Join(sys, dev), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sys, dev, "removable"), []byte(v), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	for dev, want := range map[string]bool{"sda": true, "sdb": false, "sdz": false} {
		if got := isRemovable(sys, dev); got != want {
			t.Errorf("isRemovable(%s) = %v, want %v", dev, got, want)
		}
	}
}
