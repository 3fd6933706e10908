package network

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// proxy is one published port: a listener in huskd that forwards to the
// container, as docker-proxy does.
type proxy interface {
	// port is the bound host port (the kernel's choice when 0 was asked).
	port() uint16
	Close() error
}

// listenProxy binds rec's host address and forwards to target.
func listenProxy(rec portRecord, target netip.Addr, log *slog.Logger) (proxy, error) {
	proto := rec.Port[strings.IndexByte(rec.Port, '/')+1:]
	num := rec.Port[:strings.IndexByte(rec.Port, '/')]
	host := net.JoinHostPort(rec.HostIP.String(), fmt.Sprint(rec.HostPort))
	backend := net.JoinHostPort(target.String(), num)
	log = log.With("published", host+"/"+proto, "backend", backend)
	// tcp6 and udp6 bind [::] with IPV6_V6ONLY, leaving IPv4 to the
	// binding on 0.0.0.0 beside it.
	family := "4"
	if rec.HostIP.Is6() {
		family = "6"
	}
	switch proto {
	case "tcp":
		l, err := net.Listen("tcp"+family, host)
		if err != nil {
			return nil, fmt.Errorf("Error starting userland proxy: %w", err)
		}
		p := &tcpProxy{l: l, backend: backend, log: log, conns: map[net.Conn]struct{}{}}
		p.wg.Add(1)
		go p.serve()
		return p, nil
	case "udp":
		c, err := net.ListenPacket("udp"+family, host)
		if err != nil {
			return nil, fmt.Errorf("Error starting userland proxy: %w", err)
		}
		p := &udpProxy{c: c, backend: backend, log: log, peers: map[string]*net.UDPConn{}}
		p.wg.Add(1)
		go p.serve()
		return p, nil
	}
	return nil, fmt.Errorf("cannot publish %s ports", proto)
}

// tcpProxy forwards each accepted connection to the backend, keeping
// half-closes so request/response protocols that shut down their write
// side still get their answer.
type tcpProxy struct {
	l       net.Listener
	backend string
	log     *slog.Logger
	wg      sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (p *tcpProxy) port() uint16 { return uint16(p.l.Addr().(*net.TCPAddr).Port) }

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.log.Warn("published port stopped accepting", "err", err)
			}
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.forward(c)
		}()
	}
}

func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *tcpProxy) forward(client net.Conn) {
	backend, err := net.DialTimeout("tcp4", p.backend, 10*time.Second)
	if err != nil {
		p.log.Debug("published port: backend unreachable", "err", err)
		return
	}
	if !p.track(backend) {
		backend.Close()
		return
	}
	defer p.untrack(backend)
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	go pipe(backend, client)
	go pipe(client, backend)
	wg.Wait()
}

// Close stops listening, ends every forwarded connection and waits for
// the proxy's goroutines.
func (p *tcpProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	err := p.l.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// udpIdle is how long a UDP peer's backend socket lives without traffic;
// docker-proxy uses the same 90 s.
const udpIdle = 90 * time.Second

// udpProxy forwards datagrams, with one backend socket per client address
// so replies find their way back.
type udpProxy struct {
	c       net.PacketConn
	backend string
	log     *slog.Logger
	wg      sync.WaitGroup

	mu     sync.Mutex
	peers  map[string]*net.UDPConn
	closed bool
}

func (p *udpProxy) port() uint16 { return uint16(p.c.LocalAddr().(*net.UDPAddr).Port) }

func (p *udpProxy) serve() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.c.ReadFrom(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.log.Warn("published port stopped reading", "err", err)
			}
			return
		}
		conn, err := p.peer(from)
		if err != nil {
			p.log.Debug("published port: backend unreachable", "err", err)
			continue
		}
		if conn == nil {
			return
		}
		_ = conn.SetDeadline(time.Now().Add(udpIdle))
		if _, err := conn.Write(buf[:n]); err != nil {
			p.log.Debug("published port: forward datagram", "err", err)
		}
	}
}

// peer returns the backend socket for a client, making it and its reply
// pump on first use; nil once the proxy is closed.
func (p *udpProxy) peer(from net.Addr) (*net.UDPConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil
	}
	key := from.String()
	if c, ok := p.peers[key]; ok {
		return c, nil
	}
	raddr, err := net.ResolveUDPAddr("udp4", p.backend)
	if err != nil {
		return nil, err
	}
	c, err := net.DialUDP("udp4", nil, raddr)
	if err != nil {
		return nil, err
	}
	p.peers[key] = c
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				break
			}
			_ = c.SetDeadline(time.Now().Add(udpIdle))
			if _, err := p.c.WriteTo(buf[:n], from); err != nil {
				break
			}
		}
		p.mu.Lock()
		if p.peers[key] == c {
			delete(p.peers, key)
		}
		p.mu.Unlock()
		c.Close()
	}()
	return c, nil
}

func (p *udpProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	err := p.c.Close()
	for _, c := range p.peers {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
