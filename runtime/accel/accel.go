// Package accel chooses the accelerator guests boot with: KVM where it is
// fast, TCG where it is not.
//
// A /dev/kvm that exists and works is not enough. Under software-nested KVM
// (as on the project's build machines) VM exits and page faults are cheap
// enough, yet a stock kernel takes minutes to reach user space. No synthetic
// probe found what makes it slow, so the verdict comes from what matters: a
// calibration boot of the real kernel and initramfs to agent-ready under
// both accelerators. KVM is chosen only when it boots and beats TCG. The
// verdict is cached per host boot, kernel and initramfs, so it costs two
// boots once.
//
// The KVM ioctls of the cheap first probe are issued directly: no maintained
// Go KVM binding is available from the module proxy, and it needs eight.
package accel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/renameio/v2"
)

// Accelerators.
const (
	KVM = "kvm"
	TCG = "tcg"
)

// BootFunc boots a guest with accel and returns once its agent answers, or
// fails when ctx ends first.
type BootFunc func(ctx context.Context, accel string) error

// Choice is the decision and why.
type Choice struct {
	Accel  string `json:"accel"`
	Reason string `json:"reason"`
	// Key identifies the host boot, kernel and initramfs it was made for.
	Key string `json:"key"`
}

// Options for Choose.
type Options struct {
	// Requested is "auto", "kvm" or "tcg".
	Requested string
	// KVMPath is /dev/kvm unless set.
	KVMPath string
	// Kernel and Initramfs key the cached verdict.
	Kernel, Initramfs string
	// CacheFile keeps the verdict between daemon starts.
	CacheFile string
	// Boot runs a calibration boot.
	Boot BootFunc
	// MaxBoot bounds a calibration boot (TCG's included).
	MaxBoot time.Duration
	// now reads the clock the boots are timed with; time.Now unless a test
	// sets it.
	now func() time.Time
}

// Choose decides which accelerator to use.
func Choose(ctx context.Context, opts Options) (Choice, error) {
	switch opts.Requested {
	case TCG:
		return Choice{Accel: TCG, Reason: "requested"}, nil
	case KVM:
		if p := Probe(ctx, opts.KVMPath); p.MeanFault == 0 && !p.Usable {
			return Choice{}, fmt.Errorf("--accel kvm: %s", p.Reason)
		}
		return Choice{Accel: KVM, Reason: "requested"}, nil
	case "", "auto":
	default:
		return Choice{}, fmt.Errorf("unknown accelerator %q: want auto, kvm or tcg", opts.Requested)
	}
	probe := Probe(ctx, opts.KVMPath)
	if !probe.Usable {
		return Choice{Accel: TCG, Reason: probe.Reason}, nil
	}
	key, err := cacheKey(opts.Kernel, opts.Initramfs)
	if err != nil {
		return Choice{}, err
	}
	if c, ok := readCache(opts.CacheFile, key); ok {
		c.Reason += " (cached)"
		return c, nil
	}
	c := calibrate(ctx, opts)
	c.Key = key
	if opts.CacheFile != "" {
		if b, err := json.Marshal(c); err == nil {
			_ = renameio.WriteFile(opts.CacheFile, b, 0o644)
		}
	}
	return c, nil
}

// calibrate boots under TCG, then under KVM with TCG's time as the limit.
func calibrate(ctx context.Context, opts Options) Choice {
	maxBoot := opts.MaxBoot
	if maxBoot == 0 {
		maxBoot = 60 * time.Second
	}
	now := opts.now
	if now == nil {
		now = time.Now
	}
	timed := func(accel string, limit time.Duration) (time.Duration, error) {
		bctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		start := now()
		err := opts.Boot(bctx, accel)
		return now().Sub(start), err
	}
	tcg, err := timed(TCG, maxBoot)
	if err != nil {
		return Choice{Accel: TCG, Reason: fmt.Sprintf("calibration boot under TCG failed (%v); not trying KVM", err)}
	}
	kvm, err := timed(KVM, tcg)
	if err != nil {
		return Choice{Accel: TCG, Reason: fmt.Sprintf("KVM did not boot to agent-ready within TCG's %v (%v)", tcg.Round(time.Millisecond), err)}
	}
	if kvm >= tcg {
		return Choice{Accel: TCG, Reason: fmt.Sprintf("KVM booted to agent-ready in %v, no faster than TCG's %v", kvm.Round(time.Millisecond), tcg.Round(time.Millisecond))}
	}
	return Choice{Accel: KVM, Reason: fmt.Sprintf("KVM booted to agent-ready in %v, TCG in %v", kvm.Round(time.Millisecond), tcg.Round(time.Millisecond))}
}

func cacheKey(kernel, initramfs string) (string, error) {
	h := sha256.New()
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	fmt.Fprintf(h, "boot %s\n", strings.TrimSpace(string(bootID)))
	for _, p := range []string{kernel, initramfs} {
		f, err := os.Open(p)
		if err != nil {
			return "", fmt.Errorf("accelerator cache key: %w", err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("accelerator cache key: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func readCache(path, key string) (Choice, bool) {
	if path == "" {
		return Choice{}, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Choice{}, false
	}
	var c Choice
	if json.Unmarshal(b, &c) != nil || c.Key != key || (c.Accel != KVM && c.Accel != TCG) {
		return Choice{}, false
	}
	return c, true
}
