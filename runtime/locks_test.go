package runtime

// Locks that other goroutines need are free while the I/O they once
// spanned is in progress: each test holds the I/O with a seam and shows
// the lock free meanwhile.

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/statestore"
)

// heldConn is a connection whose Close waits until release is closed,
// after telling entered: a Close that blocks (a user's Config.Dial
// connection, a stalled socket).
type heldConn struct {
	net.Conn
	once             sync.Once
	entered, release chan struct{}
}

func (c *heldConn) Close() error {
	c.once.Do(func() { close(c.entered) })
	<-c.release
	return c.Conn.Close()
}

// A cut of the network (Kill's sever, a test's partition) closes the open
// connections with the network's lock released: a dial meanwhile is
// refused at once rather than waiting for a connection's Close.
func TestNetworkCutClosesConnectionsOutsideItsLock(t *testing.T) {
	cuts := []struct {
		name string
		cut  func(*network)
	}{
		{"sever", (*network).sever},
		{"partition", func(n *network) { n.partition(true) }},
	}
	for _, tc := range cuts {
		t.Run(tc.name, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			var releaseOnce sync.Once
			t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
			n := newNetwork(nil, func(context.Context, string, string) (net.Conn, error) {
				a, b := net.Pipe()
				t.Cleanup(func() { b.Close() })
				return &heldConn{Conn: a, entered: entered, release: release}, nil
			})
			if _, err := n.dial(context.Background(), "tcp", "broker:9092"); err != nil {
				t.Fatal(err)
			}
			cut := make(chan struct{})
			go func() {
				defer close(cut)
				tc.cut(n)
			}()
			within(t, 10*time.Second, "the cut's Close of the open connection", func() { <-entered })
			within(t, 10*time.Second, "a dial during the cut", func() {
				if _, err := n.dial(context.Background(), "tcp", "broker:9092"); err == nil {
					t.Error("a dial went through a cut network")
				}
			})
			releaseOnce.Do(func() { close(release) })
			within(t, 10*time.Second, "the cut", func() { <-cut })
			n.mu.Lock()
			defer n.mu.Unlock()
			if len(n.conns) != 0 {
				t.Fatalf("%d connections still tracked after the cut", len(n.conns))
			}
		})
	}
}

// heldResetStore is a store whose Reset waits until release is closed,
// after telling entered: a badger store emptied on a slow disk.
type heldResetStore struct {
	statestore.Store
	entered, release chan struct{}
}

func (s *heldResetStore) Reset() error {
	close(s.entered)
	<-s.release
	return s.Store.Reset()
}

// A global store being emptied (its topic's offsets no longer fit) answers
// queries' Position at once, with no position, while its backing store is
// reset; once emptied it holds nothing.
func TestGlobalStoreEmptiesOutsideItsLock(t *testing.T) {
	held := &heldResetStore{Store: statestore.NewMemory(), entered: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(held.release) }) })
	g, err := newGlobalStore("g", "topic", held)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		if err := g.write(p, []statestore.Entry{{Key: []byte{'k', byte(p)}, Value: []byte("v")}}, 5); err != nil {
			t.Fatal(err)
		}
	}
	if pos, _ := g.Position(); pos != 10 {
		t.Fatalf("position %d before emptying, want 10", pos)
	}
	emptied := make(chan error, 1)
	go func() { emptied <- g.empty() }()
	within(t, 10*time.Second, "the backing store's Reset", func() { <-held.entered })
	within(t, 10*time.Second, "Position while the store is emptied", func() {
		if pos, err := g.Position(); err != nil || pos != statestore.NoPosition {
			t.Errorf("Position while emptied = %d, %v; want no position", pos, err)
		}
	})
	releaseOnce.Do(func() { close(held.release) })
	within(t, 10*time.Second, "emptying", func() {
		if err := <-emptied; err != nil {
			t.Error(err)
		}
	})
	if pos, _ := g.Position(); pos != statestore.NoPosition {
		t.Fatalf("position %d after emptying, want none", pos)
	}
	if _, ok, _ := g.Get([]byte{'k', 0}); ok {
		t.Fatal("a record survived emptying")
	}
}

// A Close ends Start's wait for the global stores' restoration: Start
// waits holding startMu, which the Close waits for in turn.
func TestGlobalRestoreWaitEndsOnClose(t *testing.T) {
	a := &App{closeAsked: make(chan struct{})}
	a.killCtx, a.killCancel = context.WithCancel(context.Background())
	defer a.killCancel()
	g := &globalThread{a: a, ready: make(chan struct{}), failed: make(chan struct{})}
	waited := make(chan error, 1)
	go func() { waited <- g.waitReady(context.Background()) }()
	a.closeAskedOnce.Do(func() { close(a.closeAsked) })
	within(t, 10*time.Second, "the wait for the global stores once Close asked", func() {
		if err := <-waited; err == nil {
			t.Error("the wait for the global stores ended without an error on Close")
		}
	})
}

// A thread makes its first client without holding mu: an exactly-once
// thread's first transaction waits for the broker (its producer ID), and
// meanwhile mu is free while the core holds the new client's callbacks
// back; once the client is made, the connection lands.
func TestFirstConnectionLeavesTheThreadsLockFree(t *testing.T) {
	b, _ := startBroker(t, "in")
	var hold atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	app, err := New(countTopology(t), Config{ApplicationID: "firstconn", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1,
		ProcessingGuarantee: ExactlyOnce,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			if hold.Load() {
				select {
				case entered <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return (&net.Dialer{}).DialContext(ctx, network, address)
		}})
	require.NoError(t, err)
	require.NoError(t, app.prepare(context.Background()))
	t.Cleanup(app.releaseResources)

	th := unconnectedThread(app, 0, cache.NewBudget(0))
	th.rest, err = newRestorer(app, th.log)
	require.NoError(t, err)
	hold.Store(true)
	connected := make(chan error, 1)
	go func() { connected <- th.connectFirst() }()
	within(t, 30*time.Second, "the first client's dial", func() { <-entered })
	waitFor(t, 10*time.Second, "the thread's lock free while its first client waits for the broker", func() bool {
		if !th.mu.TryLock() {
			return false
		}
		defer th.mu.Unlock()
		if !th.core.Busy() {
			t.Error("the first connection is not in flight while the client is made")
		}
		return true
	})
	releaseOnce.Do(func() { close(release) })
	within(t, 30*time.Second, "the first connection", func() {
		if err := <-connected; err != nil {
			t.Error(err)
		}
	})
	th.mu.Lock()
	busy := th.core.Busy()
	th.mu.Unlock()
	require.False(t, busy, "the first connection did not land")
	th.stopping.Store(true)
	th.abort()
}
