package testutil

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target and cuts them as a network
// partition does, for the process that dials through it only: Hang stops
// forwarding (bytes wait in the sockets, which stay open, as packets that
// vanish until the partition heals), Reset ends every connection with a
// TCP reset and resets new ones at once, Pass forwards again (what waited
// during a hang goes on, as TCP retransmits it).
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu sync.Mutex
	// open is closed while the proxy passes; a hang replaces it with a
	// channel that Pass closes.
	open   chan struct{}
	reset  bool
	closed bool
	conns  map[net.Conn]struct{}
}

// StartProxy listens on listen ("127.0.0.1:0" for any port) and forwards
// every connection to target until the test ends.
func StartProxy(t testing.TB, listen, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("testutil: proxy listen on %s: %v", listen, err)
	}
	p := &Proxy{ln: ln, target: target, open: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Hang stops forwarding in both directions; connections stay open.
func (p *Proxy) Hang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.passing() {
		p.open = make(chan struct{})
	}
}

// Reset ends every connection with a TCP reset; until Pass, connections
// opened meanwhile are reset as they come.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reset = true
	for c := range p.conns {
		resetConn(c)
	}
	clear(p.conns)
}

// Pass forwards again.
func (p *Proxy) Pass() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reset = false
	if !p.passing() {
		close(p.open)
	}
}

// passing reports whether open is closed; p.mu held.
func (p *Proxy) passing() bool {
	select {
	case <-p.open:
		return true
	default:
		return false
	}
}

// gate returns the channel to wait on before moving bytes.
func (p *Proxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed || p.reset {
			p.mu.Unlock()
			resetConn(c)
			continue
		}
		p.mu.Unlock()
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			resetConn(c)
			continue
		}
		if !p.track(c, up) {
			resetConn(c)
			resetConn(up)
			continue
		}
		p.wg.Add(2)
		go p.copy(up, c)
		go p.copy(c, up)
	}
}

// track records the two sides of a connection; false when the proxy was
// reset or closed meanwhile.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.reset {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// copy moves bytes from src to dst while the gate is open; when either
// side ends, both do.
func (p *Proxy) copy(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		if !p.wait() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			// What was read during a hang waits for Pass.
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// wait waits for the gate to open; false once the proxy closed.
func (p *Proxy) wait() bool {
	for {
		g := p.gate()
		<-g
		p.mu.Lock()
		closed, same := p.closed, g == p.open
		p.mu.Unlock()
		if closed {
			return false
		}
		if same {
			return true
		}
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	if !p.passing() {
		close(p.open)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

// resetConn closes c with a TCP reset rather than a clean close.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
