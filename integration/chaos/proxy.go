package chaos

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// proxy forwards one instance's broker connections to the broker and can
// cut them (a blackhole: connections are accepted and held, nothing is
// forwarded either way, as across a network partition), delay them, or
// reset them.
type proxy struct {
	ln     net.Listener
	target func() string // the broker's address now

	mu    sync.Mutex
	cut   bool
	delay time.Duration
	conns map[net.Conn]struct{}
	wake  chan struct{} // closed and replaced whenever cut or delay change
}

func newProxy(target func() string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{}), wake: make(chan struct{})}
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) close() {
	p.ln.Close()
	p.reset()
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *proxy) serve(c net.Conn) {
	p.track(c)
	defer p.untrack(c)
	defer c.Close()
	// A cut holds new connections too: the dial succeeds (the host is
	// there) and nothing comes back.
	if !p.waitPass(c) {
		return
	}
	b, err := net.DialTimeout("tcp", p.target(), 5*time.Second)
	if err != nil {
		// The broker refused: the nearest a proxy that already
		// accepted can come to a refused dial is a reset, never an
		// orderly close, which clients read as the broker hanging up
		// on purpose.
		abort(c)
		return
	}
	p.track(b)
	defer p.untrack(b)
	defer b.Close()
	done := make(chan struct{}, 2)
	go func() { p.pipe(b, c); done <- struct{}{} }()
	go func() { p.pipe(c, b); done <- struct{}{} }()
	<-done
}

// waitPass waits while the proxy is cut; false if c was closed meanwhile.
func (p *proxy) waitPass(c net.Conn) bool {
	for {
		p.mu.Lock()
		cut, wake := p.cut, p.wake
		_, open := p.conns[c]
		p.mu.Unlock()
		if !open {
			return false
		}
		if !cut {
			return true
		}
		<-wake
	}
}

// pipe copies src to dst chunk by chunk, holding each chunk while the
// proxy is cut and for the delay in force. An orderly close of src is
// passed on as one, anything else (a reset, a fault's reset) as a reset.
func (p *proxy) pipe(dst, src net.Conn) {
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if errors.Is(err, io.EOF) && n == 0 {
			dst.Close()
			return
		}
		if err != nil && n == 0 {
			abort(dst)
			return
		}
		if n > 0 {
			held := p.isCut()
			if !p.waitPass(src) {
				abort(dst)
				return
			}
			if held && resetBy(src) {
				// Across a real cut these bytes would still be in the
				// sender's retransmission queue, which its reset
				// emptied: they never arrive.
				abort(dst)
				return
			}
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			if d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				abort(src)
				return
			}
		}
	}
}

func (p *proxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// resetBy reports whether the peer of c reset the connection (a close
// with nothing more to be delivered), as the socket's pending error says:
// the bytes read from c before the reset are still readable, but a TCP
// sender that resets drops whatever the other side had not acknowledged.
func resetBy(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var soErr int
	if cerr := rc.Control(func(fd uintptr) {
		soErr, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_ERROR)
	}); cerr != nil || err != nil {
		return false
	}
	return syscall.Errno(soErr) == syscall.ECONNRESET
}

// abort closes c with a reset rather than an orderly close.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// setCut starts or ends a blackhole.
func (p *proxy) setCut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = on
	close(p.wake)
	p.wake = make(chan struct{})
}

// setDelay makes every chunk wait d before it is forwarded (0: none).
func (p *proxy) setDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// reset resets every connection through the proxy.
func (p *proxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		abort(c)
	}
	clear(p.conns)
	close(p.wake)
	p.wake = make(chan struct{})
}
