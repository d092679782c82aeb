package runtime

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// errSevered is what dials fail with after Kill.
var errSevered = errors.New("runtime: instance was killed")

// network is the dialer every client of the App uses. Kill severs it: open
// connections are closed and new dials fail, so that nothing more reaches
// the brokers — no final commit, no leave-group — as if the process had
// died.
type network struct {
	mu      sync.Mutex
	severed bool
	conns   map[net.Conn]struct{}
	dialer  net.Dialer
}

func newNetwork() *network {
	return &network{conns: make(map[net.Conn]struct{}), dialer: net.Dialer{Timeout: 10 * time.Second}}
}

func (n *network) dial(ctx context.Context, network, host string) (net.Conn, error) {
	n.mu.Lock()
	if n.severed {
		n.mu.Unlock()
		return nil, errSevered
	}
	n.mu.Unlock()
	c, err := n.dialer.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.severed {
		c.Close()
		return nil, errSevered
	}
	tc := &trackedConn{Conn: c, n: n}
	n.conns[tc] = struct{}{}
	return tc, nil
}

func (n *network) sever() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.severed = true
	for c := range n.conns {
		c.(*trackedConn).Conn.Close()
	}
	clear(n.conns)
}

type trackedConn struct {
	net.Conn
	n    *network
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.n.mu.Lock()
		delete(c.n.conns, c)
		c.n.mu.Unlock()
	})
	return c.Conn.Close()
}

// Kill stops the instance the way a crash would, for chaos tests and demos:
// its network connections are cut first, so the group is not told it left
// and nothing more is committed; then its clients and stores are closed
// without writing uncommitted work. The group moves its tasks after the
// session timeout. Kill relies on the App's own dialer: a dialer given in
// ClientOptions replaces it, and then Kill may still leave the group.
func (a *App) Kill() {
	a.net.sever()
	a.killCancel()
	for {
		s := a.State()
		if s != StateStarting && s != StateRunning {
			break
		}
		if a.state.CompareAndSwap(int32(s), int32(StateClosing)) {
			break
		}
	}
	for _, th := range a.threads {
		th.killed.Store(true)
		th.stop()
	}
	for _, th := range a.threads {
		<-th.exited
	}
	a.releaseResources()
	a.state.Store(int32(StateClosed))
	a.closeOnce.Do(func() { close(a.done) })
	a.log.Info("killed")
}
