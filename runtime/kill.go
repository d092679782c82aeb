package runtime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/instancecore"
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
	// partitioned is set by tests that cut the instance off for a while
	// and then let it back; unlike severed, it can be undone.
	partitioned bool
	// wrap, set by tests before the App starts, wraps every connection
	// dialed, to hold its traffic without closing anything: a network
	// that drops packets rather than refusing them.
	wrap   func(net.Conn) net.Conn
	conns  map[net.Conn]struct{}
	dialer net.Dialer
	// dialFn, when set, replaces dialer (Config.Dial).
	dialFn func(ctx context.Context, network, address string) (net.Conn, error)
	// tls, when set, is the client configuration every connection is
	// wrapped in. TLS lives inside this dialer rather than in kgo's
	// DialTLSConfig (which kgo refuses alongside a Dialer) so that the
	// tracked connection underneath stays in reach of Kill.
	tls *tls.Config
}

func newNetwork(tlsCfg *tls.Config, dial func(ctx context.Context, network, address string) (net.Conn, error)) *network {
	if tlsCfg != nil {
		// The App's own copy: a caller changing its config later must
		// not change what connections already made were checked against.
		tlsCfg = tlsCfg.Clone()
	}
	return &network{conns: make(map[net.Conn]struct{}), dialer: net.Dialer{Timeout: 10 * time.Second}, dialFn: dial, tls: tlsCfg}
}

func (n *network) dial(ctx context.Context, network, host string) (net.Conn, error) {
	return n.dialIn(ctx, nil, network, host)
}

// connGroup names the connections of one client, for reset.
type connGroup struct{ name string }

// dialerFor returns a dialer whose connections belong to g.
func (n *network) dialerFor(g *connGroup) func(ctx context.Context, network, host string) (net.Conn, error) {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		return n.dialIn(ctx, g, network, host)
	}
}

// reset closes the connections of g, dropping whatever they had not yet
// delivered (see dialIn); its client dials again as it needs.
func (n *network) reset(g *connGroup) int {
	n.mu.Lock()
	var out []*trackedConn
	for c := range n.conns {
		if tc := c.(*trackedConn); tc.group == g {
			out = append(out, tc)
		}
	}
	n.mu.Unlock()
	for _, c := range out {
		c.Close()
	}
	return len(out)
}

func (n *network) dialIn(ctx context.Context, group *connGroup, network, host string) (net.Conn, error) {
	n.mu.Lock()
	if err := n.blockedLocked(network); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	wrap := n.wrap
	n.mu.Unlock()
	dial := n.dialer.DialContext
	if n.dialFn != nil {
		dial = n.dialFn
	}
	c, err := dial(ctx, network, host)
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		c = wrap(c)
	}
	// A connection Eddy closes is reset rather than shut down: the
	// bytes it still holds unacknowledged are dropped with it. Shut
	// down, the kernel would go on sending them, and a request written
	// before a network cut, long given up on, would reach the broker
	// once the cut heals, after the records of whoever took over.
	if l, ok := c.(interface{ SetLinger(sec int) error }); ok {
		l.SetLinger(0)
	}
	tc, err := n.track(c, network, group)
	if err != nil {
		return nil, err
	}
	if n.tls == nil {
		return tc, nil
	}
	return n.handshake(ctx, tc, host)
}

// track registers a freshly dialed connection, so that sever and partition
// close it, unless the network was cut while it was being dialed.
func (n *network) track(c net.Conn, network string, group *connGroup) (*trackedConn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.blockedLocked(network); err != nil {
		c.Close()
		return nil, err
	}
	tc := &trackedConn{Conn: c, n: n, group: group}
	n.conns[tc] = struct{}{}
	return tc, nil
}

// handshake runs a TLS client handshake over the tracked connection c, so
// that severing c (which Kill does, even mid-handshake) cuts the TLS
// session too. Like kgo's own TLS dialing, it verifies the broker's
// certificate against the host dialed unless the configuration names a
// server.
func (n *network) handshake(ctx context.Context, c *trackedConn, host string) (net.Conn, error) {
	cfg := n.tls.Clone()
	if cfg.ServerName == "" {
		server, _, err := net.SplitHostPort(host)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("runtime: TLS to %q: %w", host, err)
		}
		cfg.ServerName = server
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("runtime: TLS handshake with %s: %w", host, err)
	}
	return tc, nil
}

// blockedLocked returns why a dial must fail now, if it must.
func (n *network) blockedLocked(network string) error {
	switch {
	case n.severed:
		return errSevered
	case n.partitioned:
		// Shaped like what a dial across a real partition returns, so
		// that the clients treat it as the transient failure it is and
		// keep retrying rather than giving up at once.
		return &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}
	}
	return nil
}

func (n *network) sever() {
	n.mu.Lock()
	n.severed = true
	conns := n.untrackAllLocked()
	n.mu.Unlock()
	closeConns(conns)
}

// partition cuts the instance off from the brokers while on is true — open
// connections are closed and new dials fail — and lets it dial again once
// on is false, for tests of an instance that is partitioned away past its
// session timeout and then comes back (a zombie). It never undoes sever.
func (n *network) partition(on bool) {
	n.mu.Lock()
	n.partitioned = on
	var conns []net.Conn
	if on {
		conns = n.untrackAllLocked()
	}
	n.mu.Unlock()
	closeConns(conns)
}

// untrackAllLocked forgets every open connection and returns them to be
// closed once mu is released: a connection's Close may be the Config.Dial
// caller's code or a test's held connection, and dials, resets and the
// other connections' Close must not wait for it. No connection is tracked
// after the cut (track refuses it), so every one the cut ends is among
// those returned.
func (n *network) untrackAllLocked() []net.Conn {
	conns := make([]net.Conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c.(*trackedConn).Conn)
	}
	clear(n.conns)
	return conns
}

func closeConns(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	n     *network
	group *connGroup // nil for the App's shared clients
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.n.mu.Lock()
		delete(c.n.conns, c)
		c.n.mu.Unlock()
	})
	return c.Conn.Close()
}

// Kill stops the instance the way a crash would. It is a fault-injection
// hook for tests of an application's failover (its standbys taking over,
// its queries answering meanwhile); a program stopping an instance calls
// Close. Its network connections are cut first, so the group is not told
// it left and nothing more is committed; then its clients and stores are
// closed without writing uncommitted work. The group moves its tasks after
// the session timeout. Kill relies on the App's own dialer, which is why
// New refuses a kgo.Dialer or kgo.DialTLSConfig in ClientOptions
// (Config.TLS dials TLS through it instead).
//
// Kill moves the App through PendingShutdown to NotRunning, or, when a
// fatal error was already stopping it, to Failed.
func (a *App) Kill() {
	if won, _ := a.shutdown(context.Background(), instancecore.ShutdownKill); won {
		a.log.Info("killed")
	}
}

// connOpts are the options by which every client of the App reaches the
// brokers: the App's own dialer (with TLS inside it), SASL, then the
// user's ClientOptions.
func (a *App) connOpts() []kgo.Opt { return connOptions(a.cfg, a.net) }

// connOptions are the options by which a client reaches the brokers
// configured in cfg through n.
func connOptions(cfg Config, n *network) []kgo.Opt {
	opts := []kgo.Opt{kgo.Dialer(n.dial)}
	if cfg.SASL != nil {
		opts = append(opts, kgo.SASL(cfg.SASL))
	}
	return append(opts, cfg.ClientOptions...)
}
