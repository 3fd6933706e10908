package accel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestChooseRequested(t *testing.T) {
	c, err := Choose(context.Background(), Options{Requested: "tcg"})
	if err != nil || c.Accel != TCG {
		t.Fatalf("tcg: got %+v, %v", c, err)
	}
	if _, err := Choose(context.Background(), Options{Requested: "hvf"}); err == nil {
		t.Fatal("unknown accelerator accepted")
	}
	if _, err := Choose(context.Background(), Options{Requested: "kvm", KVMPath: "/nonexistent/kvm"}); err == nil {
		t.Fatal("kvm without /dev/kvm accepted")
	}
}

func TestAutoWithoutKVMPicksTCG(t *testing.T) {
	c, err := Choose(context.Background(), Options{Requested: "auto", KVMPath: "/nonexistent/kvm",
		Boot: func(context.Context, string) error { t.Error("no boot expected"); return nil }})
	if err != nil || c.Accel != TCG || !strings.Contains(c.Reason, "does not exist") {
		t.Fatalf("got %+v, %v", c, err)
	}
}

// The calibration is what protects against a KVM that works but boots
// kernels too slowly: a KVM boot that does not beat TCG's loses.
func TestCalibration(t *testing.T) {
	if p := Probe(context.Background(), ""); !p.Usable {
		t.Skipf("needs a working /dev/kvm: %s", p.Reason)
	}
	dir := t.TempDir()
	kernel := filepath.Join(dir, "k")
	initrd := filepath.Join(dir, "i")
	for _, f := range []string{kernel, initrd} {
		if err := os.WriteFile(f, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Boots advance a fake clock, so no verdict depends on real time.
	var clock time.Time
	now := func() time.Time { return clock }
	took := func(d time.Duration) { clock = clock.Add(d) }
	tests := []struct {
		name string
		boot BootFunc
		want string
	}{
		{"kvm hangs", func(ctx context.Context, a string) error {
			took(time.Second)
			if a == KVM {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}, TCG},
		{"kvm fails", func(ctx context.Context, a string) error {
			took(time.Second)
			if a == KVM {
				return errors.New("no")
			}
			return nil
		}, TCG},
		{"tcg fails", func(ctx context.Context, a string) error { return errors.New("broken initramfs") }, TCG},
		{"kvm slower than tcg", func(ctx context.Context, a string) error {
			if a == KVM {
				took(3 * time.Second)
			} else {
				took(2 * time.Second)
			}
			return nil
		}, TCG},
		{"kvm beats tcg", func(ctx context.Context, a string) error {
			if a == TCG {
				took(2 * time.Second)
			} else {
				took(time.Second)
			}
			return nil
		}, KVM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "accel.json")
			opts := Options{Requested: "auto", Kernel: kernel, Initramfs: initrd, CacheFile: cache, Boot: tt.boot, MaxBoot: 5 * time.Second, now: now}
			c, err := Choose(context.Background(), opts)
			if err != nil || c.Accel != tt.want {
				t.Fatalf("got %+v, %v; want %s", c, err, tt.want)
			}
			opts.Boot = func(context.Context, string) error { t.Error("cached verdict not used"); return nil }
			c2, err := Choose(context.Background(), opts)
			if err != nil || c2.Accel != tt.want || !strings.HasSuffix(c2.Reason, "(cached)") {
				t.Fatalf("second choice %+v, %v", c2, err)
			}
		})
	}
}
