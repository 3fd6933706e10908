package kernel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBzImage returns a file with a valid-looking x86 boot header whose
// kernel_version string is version.
func fakeBzImage(version string) []byte {
	img := make([]byte, 0x1000)
	binary.LittleEndian.PutUint16(img[offBootFlag:], 0xaa55)
	copy(img[offHeaderMagic:], "HdrS")
	binary.LittleEndian.PutUint16(img[offProtocol:], 0x20f)
	const strOff = 0x3c0
	binary.LittleEndian.PutUint16(img[offKernelVersion:], strOff-0x200)
	copy(img[strOff:], version+"\x00")
	return img
}

func TestBzImageVersion(t *testing.T) {
	good := fakeBzImage("6.1.0-56-cloud-amd64 (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC")
	noMagic := bytes.Clone(good)
	copy(noMagic[offHeaderMagic:], "XXXX")
	noFlag := bytes.Clone(good)
	noFlag[offBootFlag] = 0
	oldProto := bytes.Clone(good)
	binary.LittleEndian.PutUint16(oldProto[offProtocol:], 0x104)
	noPtr := bytes.Clone(good)
	binary.LittleEndian.PutUint16(noPtr[offKernelVersion:], 0)
	tests := []struct {
		name    string
		img     []byte
		want    string
		wantErr bool
	}{
		{"debian", good, "6.1.0-56-cloud-amd64", false},
		{"bare version", fakeBzImage("6.12.3"), "6.12.3", false},
		{"no HdrS", noMagic, "", true},
		{"no boot flag", noFlag, "", true},
		{"old protocol", oldProto, "", true},
		{"no version pointer", noPtr, "", true},
		{"empty version", fakeBzImage(""), "", true},
		{"truncated", good[:0x100], "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := bzImageVersion(bytes.NewReader(tt.img))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("version = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"6.1.0-9-amd64", "6.1.0-10-amd64", -1},
		{"6.10.0", "6.9.0", 1},
		{"6.1.0-56-cloud-amd64", "6.1.0-56-cloud-amd64", 0},
		{"6.1.0", "6.1.0-1", -1},
		{"5.10.0-30-amd64", "6.1.0-1-amd64", -1},
	}
	for _, tt := range tests {
		if got := compareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestFindNewest(t *testing.T) {
	boot := t.TempDir()
	mods := t.TempDir()
	for _, v := range []string{"6.1.0-9-amd64", "6.1.0-10-amd64", "5.10.0-30-amd64"} {
		if err := os.WriteFile(filepath.Join(boot, "vmlinuz-"+v), fakeBzImage(v+" (x) #1"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Only the newest has modules; Find must not fall back to another.
	if err := os.MkdirAll(filepath.Join(mods, "6.1.0-10-amd64"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mods, "6.1.0-10-amd64", "modules.dep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := find("", boot, mods)
	if err != nil {
		t.Fatal(err)
	}
	want := Kernel{
		Path:       filepath.Join(boot, "vmlinuz-6.1.0-10-amd64"),
		Version:    "6.1.0-10-amd64",
		ModulesDir: filepath.Join(mods, "6.1.0-10-amd64"),
	}
	if k != want {
		t.Fatalf("find = %+v, want %+v", k, want)
	}

	if _, err := find(filepath.Join(boot, "vmlinuz-6.1.0-9-amd64"), boot, mods); err == nil {
		t.Fatal("find succeeded for a kernel without modules")
	}
	notKernel := filepath.Join(boot, "vmlinuz-junk")
	if err := os.WriteFile(notKernel, bytes.Repeat([]byte{1}, 0x1000), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := find(notKernel, boot, mods); !errors.Is(err, errNotBzImage) {
		t.Fatalf("find(junk) err = %v, want errNotBzImage", err)
	}
	if _, err := find("", t.TempDir(), mods); err == nil {
		t.Fatal("find succeeded in an empty /boot")
	}
}

// hostKernel returns the installed kernel, or skips.
func hostKernel(t *testing.T) Kernel {
	t.Helper()
	k, err := Find("")
	if err != nil {
		t.Skipf("no usable kernel in /boot with modules: %v", err)
	}
	return k
}

func TestFindHostKernel(t *testing.T) {
	k := hostKernel(t)
	if !strings.HasSuffix(k.Path, "vmlinuz-"+k.Version) {
		t.Errorf("kernel %s reports version %s: file name and header disagree", k.Path, k.Version)
	}
	if filepath.Base(k.ModulesDir) != k.Version {
		t.Errorf("ModulesDir %s does not match version %s", k.ModulesDir, k.Version)
	}
}
