package http1

import (
	"sync"
	"time"
)

// pool holds one address's idle connections, the most recently used on
// top: under a steady load the same connections keep serving, and those
// left at the bottom age out.
type pool struct {
	mu   sync.Mutex
	idle []*conn
	// reaper closes connections idle for longer than the timeout while
	// the pool has any, so an endpoint no longer sent to does not keep
	// its sockets.
	reaper *time.Timer
}

// get takes the most recently used idle connection that can carry a
// request, nil when none is left that has been idle for less than
// timeout. Those the endpoint closed or wrote to while they waited are
// closed; the check runs outside the lock, since it asks the kernel.
func (p *pool) get(timeout time.Duration) *conn {
	for {
		cn := p.pop(timeout)
		if cn == nil || cn.usable() {
			return cn
		}
		cn.close()
	}
}

// pop takes the most recently used idle connection, nil when none is left
// that has been idle for less than timeout.
func (p *pool) pop(timeout time.Duration) *conn {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		cn := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		if now.Sub(cn.idleAt) < timeout {
			return cn
		}
		// Every connection below it is older still.
		cn.close()
		for _, old := range p.idle {
			old.close()
		}
		clear(p.idle)
		p.idle = p.idle[:0]
	}
	return nil
}

// put returns cn to the pool, or closes it when the pool is full.
func (p *pool) put(cn *conn, max int, timeout time.Duration) {
	cn.idleAt = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= max {
		cn.close()
		return
	}
	p.idle = append(p.idle, cn)
	if p.reaper == nil {
		p.reaper = time.AfterFunc(timeout, func() { p.reap(timeout) })
	}
}

// reap closes the connections idle for longer than timeout and runs again
// while any remain.
func (p *pool) reap(timeout time.Duration) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(p.idle) && now.Sub(p.idle[n].idleAt) >= timeout {
		p.idle[n].close()
		n++
	}
	p.idle = append(p.idle[:0], p.idle[n:]...)
	clear(p.idle[len(p.idle):cap(p.idle)])
	if len(p.idle) == 0 {
		p.reaper = nil
		return
	}
	// The oldest left expires first.
	p.reaper.Reset(timeout - now.Sub(p.idle[0].idleAt))
}

// closeIdleSince closes the idle connections that went idle at t or
// before: the bottom of the pool.
func (p *pool) closeIdleSince(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(p.idle) && !p.idle[n].idleAt.After(t) {
		p.idle[n].close()
		n++
	}
	p.idle = append(p.idle[:0], p.idle[n:]...)
	clear(p.idle[len(p.idle):cap(p.idle)])
}

// closeAll closes every idle connection.
func (p *pool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cn := range p.idle {
		cn.close()
	}
	clear(p.idle)
	p.idle = p.idle[:0]
	if p.reaper != nil {
		p.reaper.Stop()
		p.reaper = nil
	}
}
