//go:build linux

// Package embeddeddns makes a guest's 127.0.0.11:53 reach huskd's DNS
// server for the container's user-defined network, so its resolv.conf can
// name 127.0.0.11 as dockerd's does.
//
// dockerd listens on 127.0.0.11 at a random port in the container's netns
// and DNATs port 53 to it, which leaves port 53 free for a container that
// serves DNS itself. A guest listener on 127.0.0.11:53 would take that
// port, and netfilter NAT would cost every guest the conntrack modules.
// Instead, cgroup socket-address programs on the guest's root cgroup
// rewrite the address at the socket layer: connect and sendmsg turn
// 127.0.0.11:53 into the server's address, and recvmsg turns the server's
// address back, so a resolver that checks where its answer came from
// (glibc, musl) sees 127.0.0.11:53. The IPv6 programs do the same for
// IPv4-mapped addresses (::ffff:127.0.0.11), which dual-stack sockets use.
//
// The programs are a handful of instructions each, written with
// cilium/ebpf's assembler so that the agent needs no BPF compiler at
// build time.
package embeddeddns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// Offsets into struct bpf_sock_addr (include/uapi/linux/bpf.h).
const (
	offUserIP4  = 4
	offUserIP6  = 8
	offUserPort = 24
)

// Redirect keeps the rewriting programs attached to one cgroup v2
// directory, pointing at one server.
type Redirect struct {
	// Cgroup returns the cgroup v2 directory whose processes, and their
	// descendants', are redirected: the guest's root cgroup, mounted on
	// demand.
	Cgroup func() (string, error)

	mu    sync.Mutex
	to    netip.AddrPort
	links []link.Link
}

// Set sends the traffic for addr (127.0.0.11:53) to to, in place of
// where it went before; a zero to stops the redirection.
func (r *Redirect) Set(addr, to netip.AddrPort) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !to.IsValid() {
		return r.closeLocked()
	}
	if !addr.Addr().Is4() || !to.Addr().Is4() {
		return fmt.Errorf("redirect %s to %s: only IPv4 addresses are redirected", addr, to)
	}
	if to == r.to && len(r.links) > 0 {
		return nil
	}
	dir, err := r.Cgroup()
	if err != nil {
		return fmt.Errorf("redirect %s to %s: %w", addr, to, err)
	}
	progs := programs(addr, to)
	if len(r.links) == len(progs) {
		// Update swaps each program in place: no query goes out between
		// a detach and an attach.
		for i, p := range progs {
			if err := updateLink(r.links[i], p); err != nil {
				return fmt.Errorf("redirect %s to %s: %w", addr, to, err)
			}
		}
		r.to = to
		return nil
	}
	var links []link.Link
	for _, p := range progs {
		l, err := attach(dir, p)
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return fmt.Errorf("redirect %s to %s: %w", addr, to, err)
		}
		links = append(links, l)
	}
	r.links, r.to = links, to
	return nil
}

func (r *Redirect) closeLocked() error {
	var errs []error
	for _, l := range r.links {
		if err := l.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	r.links, r.to = nil, netip.AddrPort{}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop the DNS redirection: %w", err)
	}
	return nil
}

// program is one socket-address program: where it attaches, and its
// instructions.
type program struct {
	attach ebpf.AttachType
	insns  asm.Instructions
}

func load(p program) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.CGroupSockAddr,
		AttachType:   p.attach,
		Instructions: p.insns,
		License:      "GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("load the %s program: %w", p.attach, err)
	}
	return prog, nil
}

func attach(dir string, p program) (link.Link, error) {
	prog, err := load(p)
	if err != nil {
		return nil, err
	}
	// The link holds its own reference to the program.
	defer prog.Close()
	l, err := link.AttachCgroup(link.CgroupOptions{Path: dir, Attach: p.attach, Program: prog})
	if err != nil {
		return nil, fmt.Errorf("attach the %s program to %s: %w", p.attach, dir, err)
	}
	return l, nil
}

func updateLink(l link.Link, p program) error {
	prog, err := load(p)
	if err != nil {
		return err
	}
	defer prog.Close()
	if err := l.Update(prog); err != nil {
		return fmt.Errorf("replace the %s program: %w", p.attach, err)
	}
	return nil
}

// programs are the rewrites of addr into to, for connect and sendmsg, and
// of to back into addr, for recvmsg, in IPv4 and IPv4-mapped IPv6. An
// IPv6 socket's sendmsg to a mapped address runs the IPv4 program.
func programs(addr, to netip.AddrPort) []program {
	fwd4, back4 := rewrite4(addr, to), rewrite4(to, addr)
	fwd6, back6 := rewrite6(addr, to), rewrite6(to, addr)
	return []program{
		{ebpf.AttachCGroupInet4Connect, fwd4},
		{ebpf.AttachCGroupUDP4Sendmsg, fwd4},
		{ebpf.AttachCGroupUDP4Recvmsg, back4},
		{ebpf.AttachCGroupInet6Connect, fwd6},
		{ebpf.AttachCGroupUDP6Recvmsg, back6},
	}
}

// word is the value a 4-byte load of b (in network order, as the kernel
// keeps addresses and ports) reads.
func word(b [4]byte) int32 { return int32(binary.NativeEndian.Uint32(b[:])) }

func portWord(p uint16) int32 { return word([4]byte{byte(p >> 8), byte(p)}) }

// rewrite4 matches user_ip4 and user_port against from and, on a match,
// stores to's. The program always allows the call (returns 1).
func rewrite4(from, to netip.AddrPort) asm.Instructions {
	return rewrite(
		[]field{{offUserIP4, word(from.Addr().As4())}, {offUserPort, portWord(from.Port())}},
		[]field{{offUserIP4, word(to.Addr().As4())}, {offUserPort, portWord(to.Port())}},
	)
}

// rewrite6 is rewrite4 for IPv4-mapped IPv6 addresses, whose first 12
// bytes are the same for from and to.
func rewrite6(from, to netip.AddrPort) asm.Instructions {
	mapped := from.Addr().As16()
	var match []field
	for i := range 4 {
		match = append(match, field{int16(offUserIP6 + 4*i), word([4]byte(mapped[4*i:]))})
	}
	match = append(match, field{offUserPort, portWord(from.Port())})
	return rewrite(match,
		[]field{{offUserIP6 + 12, word(to.Addr().As4())}, {offUserPort, portWord(to.Port())}},
	)
}

// field is a 4-byte field of struct bpf_sock_addr and a value for it.
type field struct {
	off   int16
	value int32
}

func rewrite(match, set []field) asm.Instructions {
	var insns asm.Instructions
	for _, f := range match {
		insns = append(insns,
			asm.LoadMem(asm.R2, asm.R1, f.off, asm.Word),
			asm.JNE.Imm32(asm.R2, f.value, "allow"),
		)
	}
	for _, f := range set {
		// The verifier refuses immediate stores into the context.
		insns = append(insns,
			asm.Mov.Imm32(asm.R2, f.value),
			asm.StoreMem(asm.R1, f.off, asm.R2, asm.Word),
		)
	}
	return append(insns,
		asm.Mov.Imm(asm.R0, 1).WithSymbol("allow"),
		asm.Return(),
	)
}
