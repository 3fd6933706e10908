package accel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ProbeResult is what the probe found.
type ProbeResult struct {
	// Usable: /dev/kvm exists, works, and its page faults are cheap.
	Usable bool
	// MeanFault is the measured mean cost of a guest's first touch of a page.
	MeanFault time.Duration
	// Reason explains the verdict in words for logs and `husk doctor`.
	Reason string
}

// faultLimit is the mean cost of a first page touch above which KVM is not
// worth a calibration boot (real KVM: 1-5 µs).
const faultLimit = 100 * time.Microsecond

const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46
	kvmRun                 = 0xAE80
	kvmGetRegs             = 0x8090AE81
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83
	kvmSetSregs            = 0x4138AE84

	exitIO  = 2
	exitHLT = 5

	guestMem  = 64 << 20
	pages     = (guestMem - 1<<20) / 4096
	codeStart = 0x1000
)

// guestCode (32-bit): write one byte to every page from 1 MiB up (each first
// touch is a fault the host must service), then hlt.
//
//	mov edi, 0x100000; mov ecx, pages; 1: mov byte [edi], 1; add edi, 4096; dec ecx; jnz 1b; hlt
var guestCode = []byte{
	0xBF, 0x00, 0x00, 0x10, 0x00,
	0xB9, byte(pages & 0xff), byte(pages >> 8 & 0xff), byte(pages >> 16 & 0xff), byte(pages >> 24),
	0xC6, 0x07, 0x01,
	0x81, 0xC7, 0x00, 0x10, 0x00, 0x00,
	0x49,
	0x75, 0xF4,
	0xF4,
}

type userspaceMemoryRegion struct {
	Slot, Flags                              uint32
	GuestPhysAddr, MemorySize, UserspaceAddr uint64
}

type regs struct {
	GP          [16]uint64
	RIP, RFlags uint64
}

// sregs is struct kvm_sregs: eight 24-byte kvm_segments (cs, ds, es, fs,
// gs, ss, tr, ldt), two 16-byte dtables, then cr0 at offset 224.
type sregs [312]byte

// flat32 makes segment i a flat 4 GiB 32-bit segment of the given type.
func (s *sregs) flat32(i int, typ byte) {
	seg := s[i*24 : i*24+24]
	for j := range 14 {
		seg[j] = 0 // base 0, selector 0
	}
	seg[8], seg[9], seg[10], seg[11] = 0xff, 0xff, 0xff, 0xff // limit
	seg[14] = typ
	seg[15] = 1 // present
	seg[16] = 0 // dpl
	seg[17] = 1 // db: 32-bit
	seg[18] = 1 // s: code/data
	seg[19] = 0 // l
	seg[20] = 1 // g
	seg[22] = 0 // usable
}

// Probe measures /dev/kvm at path ("" means /dev/kvm).
func Probe(ctx context.Context, path string) ProbeResult {
	if path == "" {
		path = "/dev/kvm"
	}
	mean, err := measure(ctx, path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return ProbeResult{Reason: path + " does not exist"}
	case err != nil:
		return ProbeResult{Reason: fmt.Sprintf("%s does not work: %v", path, err)}
	case mean > faultLimit:
		return ProbeResult{MeanFault: mean, Reason: fmt.Sprintf("%s is too slow: a guest page fault costs %v (limit %v)", path, mean.Round(time.Microsecond), faultLimit)}
	}
	return ProbeResult{Usable: true, MeanFault: mean, Reason: fmt.Sprintf("%s works; a guest page fault costs %v", path, mean.Round(time.Microsecond))}
}

func measure(ctx context.Context, path string) (time.Duration, error) {
	kvm, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer kvm.Close()
	if v, err := ioctl(kvm.Fd(), kvmGetAPIVersion, 0); err != nil || v != 12 {
		return 0, fmt.Errorf("KVM API version %d: %v", v, err)
	}
	vmfd, err := ioctl(kvm.Fd(), kvmCreateVM, 0)
	if err != nil {
		return 0, fmt.Errorf("create VM: %w", err)
	}
	defer unix.Close(int(vmfd))

	mem, err := unix.Mmap(-1, 0, guestMem, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0, fmt.Errorf("guest memory: %w", err)
	}
	defer unix.Munmap(mem)
	copy(mem[codeStart:], guestCode)
	region := userspaceMemoryRegion{MemorySize: guestMem, UserspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(vmfd, kvmSetUserMemoryRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		return 0, fmt.Errorf("set memory region: %w", err)
	}
	vcpu, err := ioctl(vmfd, kvmCreateVCPU, 0)
	if err != nil {
		return 0, fmt.Errorf("create vCPU: %w", err)
	}
	defer unix.Close(int(vcpu))
	size, err := ioctl(kvm.Fd(), kvmGetVCPUMmapSize, 0)
	if err != nil {
		return 0, fmt.Errorf("vCPU mmap size: %w", err)
	}
	run, err := unix.Mmap(int(vcpu), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("map vCPU: %w", err)
	}
	defer unix.Munmap(run)

	var s sregs
	if _, err := ioctl(vcpu, kvmGetSregs, uintptr(unsafe.Pointer(&s))); err != nil {
		return 0, fmt.Errorf("get sregs: %w", err)
	}
	s.flat32(0, 0xb)
	for _, i := range []int{1, 2, 3, 4, 5} {
		s.flat32(i, 0x3)
	}
	s[224] |= 1 // CR0.PE: protected mode, no paging
	if _, err := ioctl(vcpu, kvmSetSregs, uintptr(unsafe.Pointer(&s))); err != nil {
		return 0, fmt.Errorf("set sregs: %w", err)
	}
	var r regs
	if _, err := ioctl(vcpu, kvmGetRegs, uintptr(unsafe.Pointer(&r))); err != nil {
		return 0, fmt.Errorf("get regs: %w", err)
	}
	r.RIP, r.RFlags = codeStart, 2
	if _, err := ioctl(vcpu, kvmSetRegs, uintptr(unsafe.Pointer(&r))); err != nil {
		return 0, fmt.Errorf("set regs: %w", err)
	}

	// Give up once the probe has cost more than the whole budget would on a
	// usable KVM, many times over: that alone is the verdict.
	deadline := time.Now().Add(pages * faultLimit * 4)
	start := time.Now()
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if time.Now().After(deadline) {
			return time.Since(start) / time.Duration(n+1), nil
		}
		if _, err := ioctl(vcpu, kvmRun, 0); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return 0, fmt.Errorf("run: %w", err)
		}
		switch reason := *(*uint32)(unsafe.Pointer(&run[8])); reason {
		case exitIO:
		case exitHLT:
			return time.Since(start) / pages, nil
		default:
			return 0, fmt.Errorf("unexpected exit reason %d", reason)
		}
	}
}

func ioctl(fd, req, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, req, arg)
	if errno != 0 {
		return r, errno
	}
	return r, nil
}
